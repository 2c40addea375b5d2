"""Captures the Gemini CLI chats of tests/data/gemini/ from the pinned CLI (tests/data/README.md).

    .venv/bin/python tests/data/gemini/capture.py [OUT]      (OUT: this folder by default)

Runs the real Gemini CLI (tests/editors/gemini_cli.py: pinned, offline, against tests/emulator)
in a fresh folder under /tmp/compactd-gemini-capture and copies what it wrote:

* ``gemini-cli-0.61.0__compressed_on_resume.jsonl``: the compressing session of
  ``gemini_cli.compressing_session`` (a file read and two shell commands in the first prompt,
  all of it compressed when the second prompt resumes the chat, a third prompt resumed after).
* ``gemini-cli-0.61.0__hook_context.jsonl``: a session whose SessionStart and BeforeAgent hooks
  add context to each prompt, resumed twice (the prompts behind a SessionStart context are
  dropped from what later resumes send, and stay in the file).
* ``session-2026-04-01T09-30-<id8>.json``: the compressing session as Gemini CLI wrote chats
  before 0.39 (one pretty-printed JSON object, rewritten on every change), which 0.61.0 no
  longer writes but still reads. It is built from the JSONL capture by the rules of that
  version's chat recording (docs/gemini.md#older-format): the records as they stood last, no
  record for a tool result (the result lives in its call), nothing for the snapshot, and the
  "Context compressed from N% to M%." info message the interactive CLI recorded before the
  prompt that compressed. test_gemini.py checks that 0.61.0 resumes it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.editors.gemini_cli import (  # noqa: E402
    SECOND,
    Gemini,
    Hooks,
    Turns,
    compressing_session,
    gemini_exe,
    read_jsonl,
)
from tests.emulator import Emulator, Reply  # noqa: E402

WORK = Path("/tmp/compactd-gemini-capture")
LEGACY_NAME = "session-2026-04-01T09-30-{}.json"
# Gemini CLI's window for its models, and its estimate of a text's tokens (characters / 4).
WINDOW = 1_048_576


def _gemini(emu: Emulator, name: str) -> Gemini:
    root = WORK / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return Gemini(gemini_exe(), emu, root, root / "gemini.log")


def capture_compressed() -> Path:
    with Emulator() as emu:
        gemini = _gemini(emu, "compressed")
        compressing_session(gemini)
        return gemini.chat()


def capture_hook_context() -> Path:
    with Emulator() as emu:
        gemini = _gemini(emu, "hook-context")
        hooks = Hooks(gemini, ["SessionStart", "BeforeAgent"], gemini.home.parent / "hooks")
        hooks.plan(
            SessionStart={"context": "compactd: 3 earlier prompts can be recalled"},
            BeforeAgent={"context": "compactd: 61% of the window used"},
        )
        emu.gemini.set_default(
            Turns(
                {
                    "ONE": [Reply(text="The first prompt is answered.")],
                    "TWO": [Reply(text="The second prompt is answered.")],
                    "THREE": [Reply(text="The third prompt is answered.")],
                }
            )
        )
        gemini.prompt("ONE: plan the release notes")
        gemini.resume("TWO: list what changed since 1.4")
        hooks.plan(BeforeAgent={"context": "compactd: 62% of the window used"})
        gemini.resume("THREE: write the notes")
        return gemini.chat()


def _estimate(parts: list[Any]) -> float:
    return sum(len(json.dumps(p) if "text" not in p else p["text"]) / 4 for p in parts)


def legacy_from(jsonl: Path) -> dict[str, Any]:
    """The chat of ``jsonl`` as Gemini CLI before 0.39 recorded it (module docstring)."""
    records = read_jsonl(jsonl)
    meta = records[0]
    last: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for record in records:
        if "id" not in record:
            continue
        if record["id"] not in last:
            order.append(record["id"])
        last[record["id"]] = record
    messages: list[dict[str, Any]] = []
    for ident in order:
        record = dict(last[ident])
        content = record.get("content")
        if record["type"] == "user" and isinstance(content, list):
            if any("functionResponse" in p for p in content):
                continue  # a tool result: before 0.39 it lived in its call only
        messages.append(record)
    # The compression: its info message, just before the prompt that compressed, with the
    # sizes Gemini CLI's estimate gives the history before it and after it.
    snapshot_set = next(
        r["$set"]["messages"]
        for r in records
        if "<state_snapshot>" in json.dumps(r.get("$set", {}).get("messages"))
    )
    prompt_at = next(i for i, m in enumerate(messages) if m.get("content") == [{"text": SECOND}])
    original = sum(
        _estimate(m["content"] if isinstance(m["content"], list) else [{"text": m["content"]}])
        + sum(_estimate(c.get("result") or []) for c in m.get("toolCalls") or [])
        for m in messages[:prompt_at]
    )
    new = sum(_estimate(m["content"]) for m in snapshot_set)
    messages.insert(
        prompt_at,
        {
            "id": "5f0c1a2e-3b4d-4e6f-8a9b-0c1d2e3f4a5b",
            "timestamp": messages[prompt_at]["timestamp"],
            "type": "info",
            "content": f"Context compressed from {round(original / WINDOW * 100)}% to "
            f"{round(new / WINDOW * 100)}%.",
        },
    )
    return {
        "sessionId": meta["sessionId"],
        "projectHash": meta["projectHash"],
        "startTime": meta["startTime"],
        "lastUpdated": messages[-1]["timestamp"],
        "messages": messages,
        "kind": "main",
    }


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    compressed = capture_compressed()
    shutil.copyfile(compressed, out / "gemini-cli-0.61.0__compressed_on_resume.jsonl")
    shutil.copyfile(capture_hook_context(), out / "gemini-cli-0.61.0__hook_context.jsonl")
    legacy = legacy_from(compressed)
    for old in out.glob(LEGACY_NAME.format("*")):
        old.unlink()
    # JSON.stringify(conversation, null, 2), as that version wrote it.
    text = json.dumps(legacy, indent=2, ensure_ascii=False)
    (out / LEGACY_NAME.format(legacy["sessionId"][:8])).write_text(text)
    for path in sorted(out.iterdir()):
        print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
