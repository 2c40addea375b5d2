"""PreCompact / SessionStart / PostCompact hooks run by a real compaction, failures reported."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from compactd.core import prompts
from tests.e2e.test_compact_support import (
    Harness,
    harness_fixture,
    last_request_body,
    open_session,
    transcript_path,
)
from tests.helpers import CWD, transcript_lines

pytestmark = [pytest.mark.timeout(40), pytest.mark.asyncio(loop_scope="module")]

harness = harness_fixture(hooksSettingsPath=lambda root: str(root / "hooks.json"))


def _cmd(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def _slow(root: Path) -> str:
    """A hook that outlives its timeout, and leaves a mark if it is ever let finish."""
    return f"sleep 5 && touch {shlex.quote(str(root / 'slept'))}"


def _settings(root: Path) -> dict[str, Any]:
    py = sys.executable
    save = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(sys.stdin.read())"
    context = json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "SessionStart",
                "additionalContext": "Remember: the tests live in tests/.",
            }
        }
    )
    return {
        "hooks": {
            "PreCompact": [
                {
                    "matcher": "manual",
                    "hooks": [
                        {
                            "type": "command",
                            "command": _cmd(py, "-c", save, str(root / "pre.json"))
                            + " && echo 'Keep every file name.'",
                        },
                        {"type": "command", "command": "echo broken >&2; exit 3"},
                        {"type": "command", "command": _slow(root), "timeout": 0.3},
                        {"type": "command", "command": str(root / "no-such-hook")},
                    ],
                },
                {
                    "matcher": "auto",
                    "hooks": [{"type": "command", "command": f"touch {root / 'auto-ran'}"}],
                },
            ],
            "SessionStart": [
                {"matcher": "startup", "hooks": [{"type": "command", "command": "echo nope"}]},
                {
                    "matcher": "compact",
                    "hooks": [{"type": "command", "command": _cmd("echo", context)}],
                },
            ],
            "PostCompact": [
                {
                    "matcher": "*",
                    "hooks": [
                        {
                            "type": "command",
                            "command": _cmd(py, "-c", save, str(root / "post.json")),
                        }
                    ],
                }
            ],
        }
    }


async def test_hooks_run_feed_the_prompt_and_context_and_failures_are_reported(
    h: Harness,
) -> None:
    client, root = h.client, h.root
    (root / "hooks.json").write_text(json.dumps(_settings(root)))
    sid = await open_session(client)
    result = await client.compact_full(sid, custom_instructions="Focus on the parser.")

    # PreCompact: the event on stdin, stdout appended to the instructions after the request's.
    pre = json.loads((root / "pre.json").read_text())
    path = await transcript_path(client, sid)
    assert pre == {
        "session_id": sid,
        "transcript_path": path,
        "cwd": CWD,
        "trigger": "manual",
        "custom_instructions": "Focus on the parser.",
        "hook_event_name": "PreCompact",
    }
    instruction = last_request_body(h.emu)["messages"][-1]["content"][-1]["text"]
    extra = instruction[instruction.index(prompts.ADDITIONAL_INSTRUCTIONS_HEADING) :]
    assert extra.index("Focus on the parser.") < extra.index("Keep every file name.")
    assert not (root / "auto-ran").exists()  # matcher "auto" does not fit a manual compaction

    by_command = {r.command: r for r in result.hook_results}
    assert [r.event for r in result.hook_results] == [
        "PreCompact",
        "PreCompact",
        "PreCompact",
        "PreCompact",
        "SessionStart",
        "PostCompact",
    ]
    assert result.hook_results[0].ok and result.hook_results[0].exit_code == 0
    failed = by_command["echo broken >&2; exit 3"]
    assert not failed.ok and failed.exit_code == 3 and failed.stderr.strip() == "broken"
    slow = by_command[_slow(root)]
    assert slow.timed_out and not slow.ok and slow.exit_code is None
    # Stopped at its timeout, not waited for: it never got to leave its mark.
    assert not (root / "slept").exists()
    missing = by_command[str(root / "no-such-hook")]
    assert not missing.ok and missing.exit_code == 127

    # SessionStart(compact): its additional context is written after the summary.
    hook_entries = [
        a for a in result.attachments if a["attachment"]["type"] == "hook_additional_context"
    ]
    assert len(hook_entries) == 1
    assert hook_entries[0]["attachment"]["content"] == ["Remember: the tests live in tests/."]
    lines = transcript_lines(path)
    assert lines[-1]["uuid"] == hook_entries[0]["uuid"]
    view = await client.messages(sid)
    texts = " ".join(b.get("text", "") for m in view.messages for b in m["content"])
    assert "Remember: the tests live in tests/." in texts

    # PostCompact ran after the commit.
    post = json.loads((root / "post.json").read_text())
    assert post["hook_event_name"] == "PostCompact" and post["trigger"] == "manual"


async def test_a_broken_settings_file_is_reported_not_fatal(h: Harness) -> None:
    client, root = h.client, h.root
    (root / "hooks.json").write_text("{not json")
    sid = await open_session(client)
    result = await client.compact_full(sid)
    assert result.hook_results
    assert all(not r.ok and "not valid JSON" in r.stderr for r in result.hook_results)
    assert (await client.messages(sid)).boundary_uuid == result.boundary["uuid"]
