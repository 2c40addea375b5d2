"""Benchmark of the Claude Code status line and hooks: whole-process time beside a bare Python.

Run: ``.venv/bin/python tests/bench/bench_statusline.py``. Figures, not a pass/fail test.

Claude Code starts ``python -m compactd claude-code statusline`` at each render and ``... hook``
at each hook event, so what matters is the whole process: interpreter start, imports, reading
the input and the state, the answer. Each command runs ``RUNS`` times (after one warm-up run);
the medians are printed beside ``python -c pass`` and ``python -m compactd --version`` (the rest
of the command line's start-up) on the same machine, in the same run.

Last, the longest honest run (a few runs: seconds each): the hand-back of a 32 MB tail with no
compaction in it, beside the hook's own deadline (docs/safe-io.md#deadlines), which it must
stay well under.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import FIXTURES  # noqa: E402

RUNS = 15
SOURCE = FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"


def _median_ms(args: list[str], stdin: bytes, env: dict[str, str], runs: int = RUNS) -> float:
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(args, input=stdin, env=env, capture_output=True, check=True)
        if i:  # the first run warms the file cache
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        transcript = root / "t.jsonl"
        shutil.copyfile(SOURCE, transcript)
        env = {**os.environ, "XDG_DATA_HOME": str(root / "data"), "HOME": str(root)}
        py = [sys.executable]
        status = json.dumps(
            {
                "session_id": "s",
                "transcript_path": str(transcript),
                "model": {"id": "claude-sonnet-4-5"},
                "context_window": {
                    "context_window_size": 200_000,
                    "current_usage": {"input_tokens": 900, "cache_read_input_tokens": 40_000},
                },
            }
        ).encode()

        def event(name: str, **extra: str) -> bytes:
            fields = {"session_id": "s", "transcript_path": str(transcript), "cwd": tmp}
            return json.dumps({**fields, "hook_event_name": name, **extra}).encode()

        rows = [
            ("python -c pass", [*py, "-c", "pass"], b""),
            ("python -m compactd --version", [*py, "-m", "compactd", "--version"], b""),
            ("claude-code statusline", [*py, "-m", "compactd", "claude-code", "statusline"], status),
            ("claude-code hook PreCompact", [*py, "-m", "compactd", "claude-code", "hook"], event("PreCompact", trigger="auto")),
            ("claude-code hook UserPromptSubmit", [*py, "-m", "compactd", "claude-code", "hook"], event("UserPromptSubmit", prompt="x")),
            ("claude-code hook SessionStart compact", [*py, "-m", "compactd", "claude-code", "hook"], event("SessionStart", source="compact")),
        ]  # fmt: skip
        bare = None
        print(f"whole-process median of {RUNS} runs (ms), this machine, now:")
        for label, args, stdin in rows:
            ms = _median_ms(args, stdin, env)
            bare = bare or ms
            print(f"  {label:<40} {ms:8.1f}   {ms / bare:5.1f}x python -c pass")

        from compactd.agents.claude_code.cli import HOOK_DEADLINE_S

        big = root / "big.jsonl"
        user = {
            "type": "user",
            "uuid": "u",
            "sessionId": "s",
            "message": {"role": "user", "content": "hello world " * 40},
        }
        reply = {"type": "assistant", "uuid": "a", "sessionId": "s",
                 "message": {"role": "assistant", "id": "m", "model": "claude-sonnet-4-5",
                             "content": [{"type": "text", "text": "ok " * 100}],
                             "usage": {"input_tokens": 5, "output_tokens": 5}}}  # fmt: skip
        pair = (json.dumps(user) + "\n" + json.dumps(reply) + "\n").encode()
        big.write_bytes(pair * (40_000_000 // len(pair)))
        fields = {"session_id": "big", "transcript_path": str(big), "cwd": tmp}
        longest = json.dumps({**fields, "hook_event_name": "SessionStart", "source": "compact"})
        ms = _median_ms([*py, "-m", "compactd", "claude-code", "hook"], longest.encode(), env, 3)
        print(f"hook SessionStart compact on a 40 MB transcript with no compaction (32 MB read), "
              f"median of 3: {ms / 1000:.1f} s, {ms / 1000 / HOOK_DEADLINE_S:.0%} of the hook's "
              f"{HOOK_DEADLINE_S:g} s deadline")  # fmt: skip


if __name__ == "__main__":
    main()
