"""``claudeCode/compact`` and ``compactd compact`` over the real daemon: a Claude Code transcript
compacted into a NEW Claude Code session beside it (docs/claude-code.md).

The fixtures are real Claude Code 2.1.330 sessions (an automatic and a manual compaction in
them), moved into a temporary project folder that exists, with the file they read, so that the
compaction restores it as an attachment. Each test checks the written file the way Claude Code
reads it: one session id, a parent chain, the boundary's preserved segment on the kept turn,
the summary naming the original transcript, the original byte for byte unchanged.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from compactd_client import RpcError

from compactd import protocol as p
from tests.conftest import FIXTURES, SpawnDaemon
from tests.emulator import Emulator
from tests.helpers import run_cli, transcript_lines

R16_MANUAL = "claude-code-2.1.330__r16_manual.jsonl"
R2_AUTO = "claude-code-2.1.330__r2_auto.jsonl"
# The project folder the fixtures were recorded in; moved to a temporary one that exists.
RECORDED_CWD = "/home/dev/project"
OFFLINE = {"summarizer": {"offline": True}}


def _project(tmp_path: Path, fixture: str) -> tuple[Path, Path]:
    """The fixture as ``~/.claude/projects/<dir>/<sessionId>.jsonl`` of a project in
    ``tmp_path`` (with its notes.txt); returns (transcript, project cwd)."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "notes.txt").write_text("".join(f"note line {i}\n" for i in range(1, 51)))
    data = (FIXTURES / fixture).read_bytes().replace(RECORDED_CWD.encode(), str(cwd).encode())
    session_id = json.loads(data.splitlines()[0])["sessionId"]
    folder = tmp_path / "claude" / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(cwd))
    folder.mkdir(parents=True)
    transcript = folder / f"{session_id}.jsonl"
    transcript.write_bytes(data)
    return transcript, cwd


def _messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in lines if e.get("type") in ("user", "assistant")]


def _last_assistant_turn(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of the last assistant response (they share its message id)."""
    assistants = [e for e in lines if e.get("type") == "assistant"]
    last_id = assistants[-1]["message"]["id"]
    return [e for e in assistants if e["message"]["id"] == last_id]


def check_resumable(result: p.ClaudeCodeCompactResult, original: bytes, source: Path) -> None:
    """What Claude Code needs of the new session, and what the original must keep."""
    assert source.read_bytes() == original, "the original transcript changed"
    new = Path(result.new_transcript_path)
    assert new.parent == source.parent and new.name == f"{result.new_session_id}.jsonl"
    src = transcript_lines(source)
    lines = transcript_lines(new)  # every line parses

    # One session id, the new one, on every line; the source's session fields on every line.
    assert {e.get("sessionId") for e in lines} == {result.new_session_id}
    fields = {}
    for e in src:
        for name in ("version", "gitBranch", "entrypoint", "slug", "cwd", "userType"):
            if e.get(name) is not None:
                fields[name] = e[name]
    assert set(fields) >= {"version", "gitBranch", "entrypoint", "slug", "cwd"}
    for e in lines:
        assert {k: e.get(k) for k in fields} == fields, e["type"]

    # A parent chain: unique uuids, none of them the original's, each parent an earlier line.
    uuids = [e["uuid"] for e in lines]
    assert len(set(uuids)) == len(uuids)
    assert not set(uuids) & {e.get("uuid") for e in src}
    seen: set[str] = set()
    seen.add(lines[0]["uuid"])
    for e in lines[1:]:
        assert e["parentUuid"] in seen, e
        seen.add(e["uuid"])
    boundary, summary = lines[0], lines[1]
    assert boundary["subtype"] == "compact_boundary" and boundary["parentUuid"] is None
    assert boundary["logicalParentUuid"] == [e for e in src if e.get("uuid")][-1]["uuid"]

    # The summary: Claude Code's shape, the original transcript named, no compactd store path.
    assert summary["isCompactSummary"] is True and summary["parentUuid"] == boundary["uuid"]
    text = summary["message"]["content"]
    assert str(source) in text and "without asking the user again" in text
    assert f"sessions/{result.session_id}" not in text and ".local/share" not in text
    prompts = [e["promptId"] for e in src if e.get("type") == "user" and e.get("promptId")]
    assert summary["promptId"] == prompts[-1]

    # The last message is the source's last assistant turn, verbatim, and it is the boundary's
    # preserved segment, anchored on the summary.
    kept = _last_assistant_turn(src)
    messages = _messages(lines)
    assert [m["message"] for m in messages[1:]] == [k["message"] for k in kept]
    segment = boundary["compactMetadata"]["preservedSegment"]
    assert segment == {
        "headUuid": messages[1]["uuid"],
        "anchorUuid": summary["uuid"],
        "tailUuid": messages[-1]["uuid"],
    }
    assert messages[1]["parentUuid"] == summary["uuid"]
    assert all(m["message"].get("model") != "<synthetic>" for m in messages)

    # Attachments are rendered as user content, as Claude Code renders its own.
    for e in lines:
        if e["type"] == "attachment" and e.get("rendered"):
            assert e["renderedRole"] == "user"
    assert result.kept_entries == len(kept)
    assert result.resume_command.endswith(f"claude --resume {result.new_session_id}")


@pytest.mark.parametrize("fixture", [R16_MANUAL, R2_AUTO])
async def test_the_method_writes_a_session_claude_code_resumes(
    spawn_daemon: SpawnDaemon, tmp_path: Path, fixture: str
) -> None:
    source, cwd = _project(tmp_path, fixture)
    original = source.read_bytes()
    async with spawn_daemon(OFFLINE) as client:
        result = await client.claude_code_compact(str(source))
        check_resumable(result, original, source)
        assert result.summarizer == "offline"
        assert result.cwd == str(cwd)
        assert result.resume_command == f"cd {cwd} && claude --resume {result.new_session_id}"
        assert result.original_session_id == source.stem
        # Every human message since Claude Code last compacted is in the summary (the ledger's
        # guarantee); the report counts all of the transcript's.
        src = transcript_lines(source)
        last = max(i for i, e in enumerate(src) if e.get("subtype") == "compact_boundary")
        typed = [
            e["message"]["content"]
            for e in src[last:]
            if e.get("type") == "user"
            and isinstance(e["message"]["content"], str)
            and not e.get("isCompactSummary")
            and not e["message"]["content"].startswith("<")
        ]
        summary = transcript_lines(result.new_transcript_path)[1]["message"]["content"]
        assert all(t in summary for t in typed)
        # Every message the user typed, those before Claude Code's own compactions included.
        assert result.user_messages == result.user_messages_kept >= len(typed)
        assert result.post_tokens < result.pre_tokens
        # notes.txt was read: its current content comes back as an attachment.
        lines = transcript_lines(result.new_transcript_path)
        files = [e for e in lines if e["type"] == "attachment"]
        assert result.attachments == len(files) >= 1
        assert any("note line 50" in json.dumps(e["rendered"]) for e in files)
        # compactd's own session holds the same compaction, in its store.
        stats = await client.stats(result.session_id)
        assert [c.mechanism for c in stats.compactions][-1] == "partial"
        # A second export is another new session: nothing is overwritten.
        again = await client.claude_code_compact(str(source), custom_instructions="notes")
        assert again.new_session_id != result.new_session_id
        check_resumable(again, original, source)
    assert sorted(f.name for f in source.parent.iterdir()) == sorted(
        [source.name, f"{result.new_session_id}.jsonl", f"{again.new_session_id}.jsonl"]
    )


async def test_online_summary_comes_from_the_model(
    spawn_daemon: SpawnDaemon, emulator: Emulator, tmp_path: Path
) -> None:
    source, _ = _project(tmp_path, R16_MANUAL)
    original = source.read_bytes()
    options = {"summarizer": {"baseUrl": emulator.base_url, "apiKey": "test"}}
    async with spawn_daemon(options) as client:
        offline = await client.claude_code_compact(str(source))
        assert offline.summarizer == "offline" and not emulator.message_requests
        online = await client.claude_code_compact(str(source), online=True)
    assert online.summarizer not in (None, "offline", "offlineFallback")
    assert len(emulator.message_requests) == 1
    check_resumable(online, original, source)
    summary = transcript_lines(online.new_transcript_path)[1]["message"]["content"]
    assert "Summary:" in summary and "Primary Request and Intent" in summary


async def test_bad_input_is_refused_and_writes_nothing(
    spawn_daemon: SpawnDaemon, tmp_path: Path
) -> None:
    source, _ = _project(tmp_path, R16_MANUAL)
    folder = source.parent
    not_a_transcript = folder / "notes.jsonl"
    not_a_transcript.write_text("just some text\n")
    # A session that never got an answer: nothing to resume from.
    unanswered = folder / "unanswered.jsonl"
    first = (FIXTURES / R16_MANUAL).read_bytes().splitlines()[2]
    unanswered.write_bytes(first + b"\n")
    before = sorted(folder.iterdir())
    async with spawn_daemon(OFFLINE) as client:
        cases = [
            ({"transcriptPath": "relative/path.jsonl"}, p.ErrorCode.INVALID_PARAMS),
            ({"transcriptPath": ""}, p.ErrorCode.INVALID_PARAMS),
            ({"transcriptPath": str(folder / "missing.jsonl")}, p.ErrorCode.TRANSCRIPT_UNREADABLE),
            ({"transcriptPath": str(folder)}, p.ErrorCode.TRANSCRIPT_UNREADABLE),
            ({"transcriptPath": str(not_a_transcript)}, p.ErrorCode.TRANSCRIPT_UNREADABLE),
            ({"transcriptPath": str(unanswered)}, p.ErrorCode.NOT_ENOUGH_MESSAGES),
            ({"transcriptPath": str(source), "extra": 1}, p.ErrorCode.INVALID_PARAMS),
            # online without a key: said, nothing written.
            ({"transcriptPath": str(source), "online": True}, p.ErrorCode.INVALID_PARAMS),
        ]
        for params, code in cases:
            with pytest.raises(RpcError) as err:
                await client.request(p.CLAUDE_CODE_COMPACT, params)
            assert err.value.code == code, (params, err.value)
        assert sorted(folder.iterdir()) == before
        assert not (await client.list_sessions()).sessions  # nothing was imported either
        # The daemon goes on.
        result = await client.claude_code_compact(str(source))
        assert Path(result.new_transcript_path).is_file()


async def _cli(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """The CLI without an API key: the offline summary."""
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    return await run_cli(*args, env=env, cwd=cwd)


async def test_the_cli_compacts_and_prints_the_resume_command(tmp_path: Path) -> None:
    source, cwd = _project(tmp_path, R2_AUTO)
    original = source.read_bytes()
    code, out, err = await _cli("compact", str(source), "--json")
    assert code == 0, err
    result = msgspec.convert(json.loads(out), p.ClaudeCodeCompactResult)
    check_resumable(result, original, source)
    # In the project folder the command needs no `cd`.
    code, out, err = await _cli("compact", str(source), "--plain", cwd=cwd)
    assert code == 0, err
    others = {source.stem, result.new_session_id}
    new_id = [f.stem for f in source.parent.iterdir() if f.stem not in others]
    assert len(new_id) == 1
    assert f"\n  claude --resume {new_id[0]}\n" in out
    assert "note:" not in out  # the folder exists, and the session is where Claude Code looks
    counted = f"{result.user_messages_kept} of {result.user_messages}"
    assert "user messages carried over" in out and counted in out
    assert "the original is unchanged" in out
    # Errors a person can act on, without a traceback.
    code, _, err = await _cli("compact", str(tmp_path / "missing.jsonl"))
    assert code == 1 and "missing.jsonl" in err and "Traceback" not in err
    code, _, err = await _cli("compact", str(source), "--online")
    assert code == 2 and "--online needs ANTHROPIC_API_KEY" in err
