"""Rehydration planning: what to re-inject after a compaction, under the reference's budgets.

After a compaction the model has only the summary, so the agent's working set is attached again
(docs/rehydration.md): the most recently read files re-read from disk, the todo list, the plan
file and plan mode, the skills it invoked, background agents still running and the announcements
the client supplies. The listings of tools, agents, skills and MCP instructions found in the
transcript are not repeated: the main loop announces them again after a compaction
(docs/rehydration.md#background-agents-and-announcements). This module decides which and how
much, from facts gathered by scanning the transcript (``scan_context``) and file contents already
read by the I/O layer (the engine's rehydration step), within the reference's caps and the
room the view budget leaves (``fit_attachments``). It returns attachment payloads in Claude
Code's attachment shape (``{"type": "file", ...}``) and renders the text the model reads.

One stage per module: ``paths`` (normalizing and showing paths), ``files`` (which files to
re-read), ``scan`` (the facts the transcript holds), ``budget`` (the caps and cutting a text),
``plan`` (the payloads in order), ``fit`` (within the room left) and ``render`` (the text the
model reads and the transcript entry); the names callers use are re-exported here.

Pure: no I/O, deterministic, paths are only joined and normalized as strings.
"""

from __future__ import annotations

from compactd.core.rehydrate.budget import MIN_PARTIAL_TOKENS, Budgets, truncate_to_tokens
from compactd.core.rehydrate.files import (
    FileCandidate,
    select_files,
)
from compactd.core.rehydrate.fit import (
    fit_attachments,
)
from compactd.core.rehydrate.paths import (
    display_path,
    normalize_path,
)
from compactd.core.rehydrate.plan import (
    FileNotice,
    FileSnapshot,
    PlanSnapshot,
    RehydrationInputs,
    SkillSnapshot,
    payload_tokens,
    plan_attachments,
)
from compactd.core.rehydrate.render import (
    attachment_entry,
    render,
)
from compactd.core.rehydrate.scan import (
    ContextFacts,
    PlanInfo,
    RunningAgent,
    SkillRef,
    read_paths,
    scan_context,
)
from compactd.core.tokens import estimate_text_tokens

__all__ = [
    "Budgets",
    "ContextFacts",
    "FileCandidate",
    "FileNotice",
    "FileSnapshot",
    "MIN_PARTIAL_TOKENS",
    "PlanInfo",
    "PlanSnapshot",
    "RehydrationInputs",
    "RunningAgent",
    "SkillRef",
    "SkillSnapshot",
    "attachment_entry",
    "display_path",
    "estimate_text_tokens",
    "fit_attachments",
    "normalize_path",
    "payload_tokens",
    "plan_attachments",
    "read_paths",
    "render",
    "scan_context",
    "select_files",
    "truncate_to_tokens",
]
