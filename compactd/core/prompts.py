"""Summarization prompts, summary formatting and the continuation message, in compactd's words.

A compaction asks a model to replace part of a conversation with a structured summary
(docs/compaction.md#prompt, docs/partial.md#prompt-variants). ``compact_prompt`` builds that
instruction for each kind of compaction: a full compaction (nine sections), the two partial
directions (``upTo`` keeps newer messages after the summary, ``from`` keeps older ones before
it) and a sub-agent's continuation summary. The model drafts in an ``<analysis>`` block that
``format_summary`` throws away; the ``<summary>`` block becomes a plain "Summary:" section.
``continuation_message`` wraps the summary into the user turn the agent resumes from.

Pure: no I/O. The texts are written for compactd, not copied from any other tool.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Literal

__all__ = [
    "ADDITIONAL_INSTRUCTIONS_HEADING",
    "NO_TOOLS_PREAMBLE",
    "NO_TOOLS_REMINDER",
    "PLAIN_SYSTEM_PROMPT",
    "PromptKind",
    "SUMMARY_HEADING",
    "agent_summary_message",
    "compact_prompt",
    "continuation_message",
    "resume_message",
    "format_summary",
    "join_instructions",
    "strip_continuation",
]

PromptKind = Literal["full", "partialUpTo", "partialFrom", "subagent"]

# The summarization turn is the model's only turn: a tool call instead of text leaves nothing to
# summarize with (docs/compaction.md#prompt), so the prohibition opens the prompt and closes it
# again.
NO_TOOLS_PREAMBLE: Final = (
    "IMPORTANT: answer with text only. Do not call any tool: no Read, no Bash, no Grep, no "
    "Edit, nothing. Everything you need is already in the conversation above. This request "
    "allows exactly one reply, and a tool call would be refused and waste it, leaving no "
    "summary at all. Your reply must be an <analysis> block followed by a <summary> block."
)

NO_TOOLS_REMINDER: Final = (
    "REMINDER: do not call any tool. Reply with plain text only: the <analysis> block, then "
    "the <summary> block."
)

# Heading under which instructions from the request and from PreCompact hooks are appended.
ADDITIONAL_INSTRUCTIONS_HEADING: Final = "## Additional instructions"

# What the <summary> tags become in the stored summary.
SUMMARY_HEADING: Final = "Summary:"

# System prompt of the fallback request, which shares nothing with the main loop's cache.
PLAIN_SYSTEM_PROMPT: Final = (
    "You write precise, complete summaries of conversations between a user and an AI coding "
    "agent, so that the agent can carry on the work from the summary alone."
)

_ANALYSIS_GUIDE: Final = """\
Before the summary, think inside <analysis> tags. This draft is thrown away afterwards, so use \
it freely: walk through the conversation in order and, for each part, note
- what the user asked for and what they meant by it, including every correction or change of \
direction they gave,
- what was done about it,
- the decisions and technical details: file names, complete code snippets, function \
signatures, edits made,
- the errors met and how each one was resolved,
- the feedback the user gave, above all where they asked for something to be done differently.
Then hold the draft against the sections below and add whatever is missing."""

# Sections 1-5 are the same in every summary of the main conversation; the rest differs by
# kind (a partial "upTo" summary is followed by newer messages,
# docs/partial.md#prompt-variants).
_COMMON_SECTIONS: Final = """\
1. Primary Request and Intent: every explicit request of the user and the intent behind it, \
in detail.
2. Key Technical Concepts: the technologies, frameworks, conventions and ideas that came up.
3. Files and Code Sections: each file that was read, changed or created; why it matters; what \
changed in it; complete code snippets where they matter.
4. Errors and Fixes: each error met, how it was fixed, and what the user said about it.
5. Problem Solving: the problems solved so far and any troubleshooting still under way.
"""

_FULL_SECTIONS: Final = (
    _COMMON_SECTIONS
    + """\
6. All User Messages: every message the user wrote that is not a tool result, in order and as \
close to verbatim as possible. They show how the user's intent evolved: leave none out.
7. Pending Tasks: what the user asked for that is not done yet.
8. Current Work: exactly what was being worked on right before this summary, with file names \
and code snippets, paying special attention to the most recent messages.
9. Optional Next Step: the next step, only if it follows directly from the user's most recent \
request and the work in section 8. Quote the latest messages verbatim to show exactly where \
the work stopped, so that the task does not drift. If the last task was finished, suggest only \
a step the user explicitly asked for."""
)

_UP_TO_SECTIONS: Final = (
    _COMMON_SECTIONS
    + """\
6. All User Messages: every message the user wrote that is not a tool result, in order and as \
close to verbatim as possible. Leave none out.
7. Pending Tasks: what the user asked for that is not done yet.
8. Work Completed: what was accomplished by the end of the part being summarized, with file \
names and code snippets.
9. Context for Continuing Work: what a reader of the newer messages that follow needs to know \
to understand them: decisions in force, state of files, open questions."""
)

_SUBAGENT_SECTIONS: Final = """\
1. Task Overview: the task this agent was given, its goal, its success criteria and its \
constraints.
2. Current State: what is done, what is in progress, which files were created or changed.
3. Important Discoveries: findings, decisions taken, approaches that failed and why.
4. Next Steps: what remains to be done, in order, and anything blocking it.
5. Context to Preserve: exact values, paths, identifiers, commands and preferences that must \
not be lost."""

# The summary shares a fixed budget with what compactd adds after it, so its length is asked
# for; exact facts are worth more than prose.
_LENGTH: Final = (
    "Keep the summary within about {words:,} words, and spend them on exact facts: the "
    "user's own words, names, paths, commands and their outcome, decisions. The summary is "
    "checked against a record of the conversation afterwards, and any user message, command "
    "or path it leaves out is added back verbatim."
)

_INTROS: Final[dict[str, str]] = {
    "full": (
        "Write a thorough summary of the conversation so far. It will replace the "
        "conversation: from now on the agent continues the work with only your summary and "
        "the files on disk, so everything needed to carry on without asking the user again "
        "must be in it: the user's explicit requests, the technical decisions, the code that "
        "was touched and the exact state of the work."
    ),
    "partialUpTo": (
        "Write a thorough summary of the conversation so far. Only this earlier part of the "
        "conversation is being replaced: newer messages will follow your summary unchanged, so "
        "describe what was done and what a reader of those newer messages needs to know, "
        "rather than what to do next."
    ),
    "partialFrom": (
        "Write a thorough summary of the RECENT part of this conversation. The earlier "
        "messages stay in the context exactly as they are and must not be summarized again; "
        "summarize only what happened after them, and refer to the earlier part only where "
        "the recent work depends on it."
    ),
    "subagent": (
        "You are a sub-agent working on a delegated task, and your conversation is about to be "
        "replaced by a continuation summary. Write it so that you can resume the task from the "
        "summary alone, without repeating work already done."
    ),
}

_SECTIONS: Final[dict[str, str]] = {
    "full": _FULL_SECTIONS,
    "partialUpTo": _UP_TO_SECTIONS,
    "partialFrom": _FULL_SECTIONS,
    "subagent": _SUBAGENT_SECTIONS,
}


def _example(sections: str) -> str:
    titles = [line.split(":", 1)[0] for line in sections.splitlines() if re.match(r"\d+\.", line)]
    body = "\n\n".join(f"{title}:\n   [...]" for title in titles)
    return (
        "Shape of the reply:\n<example>\n<analysis>\n[your walk through the conversation]\n"
        f"</analysis>\n\n<summary>\n{body}\n</summary>\n</example>"
    )


def join_instructions(*parts: str | None) -> str | None:
    """Combine custom instructions (request first, then hooks); None when all are empty."""
    kept = [part.strip() for part in parts if part and part.strip()]
    return "\n\n".join(kept) if kept else None


def compact_prompt(
    kind: PromptKind, custom_instructions: Sequence[str] = (), *, target_words: int | None = None
) -> str:
    """The instruction sent as the final user text of a summarization request.

    ``custom_instructions`` are appended, in order, under ``ADDITIONAL_INSTRUCTIONS_HEADING``;
    the request's own instructions go first and PreCompact hook output after them.
    ``target_words``: the length the summary should stay within (the summary's share of the
    view budget, docs/compaction.md#survival-ledger).
    """
    if kind not in _INTROS:
        raise ValueError(f"unknown prompt kind {kind!r}")
    sections = _SECTIONS[kind]
    parts = [
        NO_TOOLS_PREAMBLE,
        _INTROS[kind],
        _ANALYSIS_GUIDE,
        "Then write the summary inside <summary> tags, with exactly these sections:\n\n" + sections,
        _example(sections),
    ]
    if target_words:
        parts.append(_LENGTH.format(words=target_words))
    extra = [c.strip() for c in custom_instructions if c and c.strip()]
    if extra:
        parts.append(ADDITIONAL_INSTRUCTIONS_HEADING + "\n\n" + "\n\n".join(extra))
    parts.append(NO_TOOLS_REMINDER)
    return "\n\n".join(parts)


_ANALYSIS_BLOCK: Final = re.compile(r"<analysis>.*?</analysis>", re.DOTALL | re.IGNORECASE)
_SUMMARY_BLOCK: Final = re.compile(r"<summary>(.*?)</summary>", re.DOTALL | re.IGNORECASE)
_SUMMARY_OPEN: Final = re.compile(r"<summary>", re.IGNORECASE)
_BLANK_RUNS: Final = re.compile(r"\n[ \t]*(?:\n[ \t]*)+\n")


def format_summary(raw: str) -> str:
    """The stored form of a model's reply: no analysis, a "Summary:" heading, tidy blank lines.

    A reply cut short by the output limit may open ``<summary>`` without closing it, or leave
    an ``<analysis>`` block unclosed before the summary: the summary text is still kept.
    """
    text = _ANALYSIS_BLOCK.sub("", raw)
    match = _SUMMARY_BLOCK.search(text)
    if match is not None:
        inner = match.group(1).strip()
        text = text[: match.start()] + f"{SUMMARY_HEADING}\n{inner}" + text[match.end() :]
    else:
        opened = _SUMMARY_OPEN.search(text)
        if opened is not None:
            # Truncated reply: everything before the open tag is scratch work (possibly an
            # unclosed analysis block); keep what the summary got to say.
            text = f"{SUMMARY_HEADING}\n" + text[opened.end() :].strip()
    if re.search(r"<analysis>", text, re.IGNORECASE):
        # An analysis block that never closed and no summary: the draft is all there is.
        text = re.sub(r"</?analysis>", "", text, flags=re.IGNORECASE)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip()


_OPENING: Final = (
    "This session continues an earlier conversation that grew too long for the context "
    "window. The summary below stands in for the earlier part of that conversation."
)

_TRANSCRIPT_POINTER: Final = "If you need details from before this point"

_PARTIAL_TAIL: Final = "The most recent messages of the conversation follow, unchanged."

_AUTO_TAIL: Final = (
    "Pick up the last task exactly where it stopped, without asking the user any further "
    "questions. Do not acknowledge or recap this summary and do not announce that you are "
    "continuing: go straight on with the next action."
)


_RESUMED_TAIL: Final = (
    "The session goes on in Claude Code from here. Carry on with the work as the summary and "
    "the messages after it leave it, without asking the user again for anything they already "
    "said, and without acknowledging or recapping this summary."
)


def resume_message(summary: str, *, transcript_path: str) -> str:
    """The summary's user message in a session compactd wrote for ``claude --resume``
    (docs/claude-code.md#the-summary).

    Unlike ``continuation_message`` it points at the Claude Code transcript the session was
    compacted from (it keeps growing there, compactd's copy does not), says that the last
    assistant turn follows verbatim, and tells the agent to carry on without asking again.
    """
    return "\n\n".join(
        [
            _OPENING,
            strip_continuation(summary),
            f"{_TRANSCRIPT_POINTER} that the summary leaves out (exact code, error messages, "
            "command output, text you wrote), read the original Claude Code transcript of the "
            f"session at: {transcript_path}",
            # The agent resuming in Claude Code has no recall/search: the pointers the summary
            # carries are the uuids of that file's lines (docs/claude-code.md#the-summary).
            "Where the summary says recall:<id>, <id> is the uuid of a line of that transcript: "
            "search the file for it to read the entry whole.",
            _PARTIAL_TAIL,
            _RESUMED_TAIL,
        ]
    )


# How the agent gets back what a summary compactd wrote leaves out: compactd's MCP server, which
# its plugin installs beside the agent (docs/claude-code.md#the-plugin).
_CLAUDE_CODE_RECALL: Final = (
    "Where the summary says recall:<id>, the `recall` tool of the compactd MCP server returns "
    "that entry of the transcript whole; it also finds anything else from before this point by "
    "a few words, a file path or a command."
)


def agent_summary_message(
    summary: str,
    *,
    transcript_path: str | None,
    trigger: str,
    recent_messages_kept: bool,
) -> str:
    """The first message of a compaction compactd answers for the agent it runs inside (Claude
    Code's ``session.compact``, docs/claude-code.md#the-plugin): the summary, where the whole
    transcript is, how to recall from it, whether the latest messages follow verbatim, and, for
    the automatic compaction in the middle of a turn, to carry on without a word about it."""
    # The agent calls the MCP tool `recall`, not the protocol's recall/search.
    parts = [_OPENING, strip_continuation(summary).replace("recall/search", "recall")]
    if transcript_path:
        parts.append(
            f"{_TRANSCRIPT_POINTER} that the summary leaves out (exact code, error messages, "
            f"command output, text you wrote), the session's transcript keeps all of it: "
            f"{transcript_path}"
        )
    parts.append(_CLAUDE_CODE_RECALL)
    if recent_messages_kept:
        parts.append(_PARTIAL_TAIL)
    if trigger == "auto":
        parts.append(_AUTO_TAIL)
    return "\n\n".join(parts)


def continuation_message(
    summary: str,
    *,
    transcript_path: str | None,
    trigger: Literal["manual", "auto"],
    recent_messages_kept: bool = False,
) -> str:
    """The user turn the agent resumes from after a compaction
    (docs/compaction.md#continuation-message).

    ``summary`` is the already formatted summary. For an automatic compaction the agent is
    told to carry on with the last task silently; a partial compaction says that the recent
    messages follow verbatim.
    """
    parts = [_OPENING, summary.strip()]
    if transcript_path:
        parts.append(
            f"{_TRANSCRIPT_POINTER} that the summary leaves out (exact "
            "code, error messages, command output, text you wrote), read the full transcript "
            f"of the session at: {transcript_path}"
        )
    if recent_messages_kept:
        parts.append(_PARTIAL_TAIL)
    if trigger == "auto":
        parts.append(_AUTO_TAIL)
    return "\n\n".join(parts)


def strip_continuation(text: str) -> str:
    """The summary inside a continuation message, without the wrapper paragraphs.

    Used when a previous summary is carried into a new one, so that the wrapper text does not
    pile up with each compaction. Text that is not a continuation message comes back as is.
    """
    paragraphs = re.split(r"\n\s*\n", text.strip())
    kept = [
        p
        for p in paragraphs
        if p.strip()
        not in (_OPENING, _PARTIAL_TAIL, _AUTO_TAIL, _RESUMED_TAIL, _CLAUDE_CODE_RECALL)
        and not p.strip().startswith(_TRANSCRIPT_POINTER)
    ]
    return "\n\n".join(kept).strip()
