"""Can BeforeModel carry compactd's whole compaction in Gemini CLI? (docs/gemini.md#beforemodel-and-compactds-own-compaction)

Run: ``.venv/bin/python tests/bench/bench_gemini_beforemodel.py`` (after tests/editors/setup.sh
installed the pinned Gemini CLI; ``GEMINI_CLI`` names another). It runs the compressing session
of tests/editors/gemini_cli.py twice against tests/emulator, offline: once as it is, and once
with a BeforeModel hook that replaces, in every request that holds a ``<state_snapshot>``, the
snapshot's text with compactd's own compaction of the same span: compactd's summary (its
offline summary, exact and model-free: a model summary would have to be ready before the first
request after the compression, which a hook cannot wait for) and its ledger of what the span
held. It prints, for each request after the compression: whether the model got compactd's text
and not the snapshot, the request's size as the API counted it (``promptTokenCount``), and the
hook's time; then the runs' wall times, and what the chat file and the CLI's own next
compression see. Figures, not a pass/fail test.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.editors.gemini_cli import (  # noqa: E402
    FIRST,
    NOTES,
    SECOND,
    THIRD,
    THRESHOLD,
    Gemini,
    compressing_turns,
    gemini_exe,
    shell,
)
from tests.emulator import Emulator, Reply, ToolUse  # noqa: E402
from tests.emulator.gemini import gemini_request_kind  # noqa: E402

MARK = "compactd-summary"
# The hook: the snapshot's text replaced by compactd's compaction of the span it replaced.
HOOK = r"""
import json, sys, time
started = time.perf_counter()
sys.path.insert(0, sys.argv[2])
event = json.load(sys.stdin)
messages = (event.get("llm_request") or {}).get("messages") or []
first = messages[0]["content"] if messages else ""
at = first.find("<state_snapshot>")
out = None
if at >= 0:
    from compactd import port
    from compactd.core.handback import hand_back, last_compaction
    from compactd.core.ledger import build_ledger
    from compactd.core.offline_summary import offline_summary
    with open(event["transcript_path"], "rb") as fh:
        records = port.records(port.complete(fh.read()))
    at_summary = max(i for i, r in enumerate(records) if r.entry.is_compact_summary)
    compaction = last_compaction(records[: at_summary + 1])
    summary = offline_summary(build_ledger(compaction.replaced, cwd=event["cwd"]), limit=8000)
    ledger = hand_back(compaction, limit=6000, cwd=event["cwd"], agent="Gemini CLI").text
    text = first[:at] + f"<MARK>\n{summary}\n\n{ledger}\n</MARK>"
    out = {"hookSpecificOutput": {"hookEventName": "BeforeModel",
                                  "llm_request": {"messages": [{"role": "user", "content": text}]}}}
with open(sys.argv[1], "a") as log:
    log.write(json.dumps({"replaced": out is not None,
                          "ms": (time.perf_counter() - started) * 1000}) + "\n")
if out is not None:
    sys.stdout.write(json.dumps(out))
""".replace("MARK", MARK)


def _session(exe: str, root: Path, *, replace: bool) -> dict[str, Any]:
    with Emulator() as emu:
        g = Gemini(exe, emu, root, root / "gemini.log")
        log = root / "hook.jsonl"
        if replace:
            script = root / "hook.py"
            script.write_text(HOOK)
            g.add_hook("BeforeModel", f"{sys.executable} {script} {log} {ROOT}", timeout_ms=60_000)
        # The compressing session, its third prompt reading the notes again: the CLI compresses
        # a second time, in the middle of that turn.
        g.compress_at(THRESHOLD)
        (g.project / "notes.txt").write_text(NOTES)
        turns = compressing_turns()
        turns.replies["THIRD"] = [
            Reply(text="Reading again.", tool_uses=[ToolUse("read_file", {"file_path": "notes.txt"})]),
            Reply(text="Checking.", tool_uses=[shell("echo gamma-check-5e2", "gamma check")]),
            Reply(text="Both checks passed."),
        ]  # fmt: skip
        emu.gemini.set_default(turns)
        started = time.perf_counter()
        runs = (g.prompt(FIRST), g.resume(SECOND), g.resume(THIRD))
        wall = time.perf_counter() - started
        after = [
            body
            for run in runs[1:]
            for body in run.bodies("main")
            if "<state_snapshot>" in json.dumps(body) or MARK in json.dumps(body)
        ]
        usages = [
            r.usage["promptTokenCount"]
            for run in runs[1:]
            for r in run.requests
            if isinstance(r.body, dict) and gemini_request_kind(r.body) == "main" and r.usage
        ]
        chat = g.chat().read_text()
        hook = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return {
            "wall": wall,
            "after": after,
            "prompt_tokens": usages,
            "chat_has_snapshot": "<state_snapshot>" in chat,
            "chat_has_mark": MARK in chat,
            "hook": hook,
            "compressions": sum(len(run.bodies("compression")) for run in runs),
            "snapshot_input": [json.dumps(b) for run in runs for b in run.bodies("compression")],
        }


def main() -> int:
    exe = gemini_exe()
    work = Path(tempfile.mkdtemp(prefix="bench-gemini-bm-"))
    try:
        plain = _session(exe, work / "plain", replace=False)
        replaced = _session(exe, work / "replaced", replace=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("requests after the compression (runs 2 and 3 of the compressing session):")
    print(f"{'':<28} {'with the snapshot':>18} {'with compactd':>14}")

    def first_text(body: dict[str, Any]) -> str:
        return "".join(p.get("text", "") for p in body["contents"][0]["parts"])

    # compactd's text in place of the CLI's snapshot: right after the session context.
    carried = [first_text(b).split("</session_context>")[-1].lstrip().startswith(f"<{MARK}>")
               for b in replaced["after"]]  # fmt: skip
    print(f"{'requests':<28} {len(plain['after']):>18} {len(replaced['after']):>14}")
    print(f"{'compactd where snapshot was':<28} {'-':>18} {sum(carried):>11}/{len(carried)}")
    for label, word in (("the first prompt", FIRST), ("the second prompt", SECOND)):
        print(f"{'requests quoting ' + label:<28} "
              f"{sum(word in json.dumps(b) for b in plain['after']):>18} "
              f"{sum(word in json.dumps(b) for b in replaced['after']):>14}")  # fmt: skip
    for n, (a, b) in enumerate(
        zip(plain["prompt_tokens"], replaced["prompt_tokens"], strict=False)
    ):
        print(f"{f'request {n + 1}: promptTokenCount':<28} {a:>18,} {b:>14,}")
    times = [h["ms"] for h in replaced["hook"]]
    hit = [h["ms"] for h in replaced["hook"] if h["replaced"]]
    print(f"\nhook calls: {len(times)}, of which replaced: {len(hit)}; median time "
          f"{statistics.median(hit or [0]):.0f} ms when replacing, "
          f"{statistics.median([h['ms'] for h in replaced['hook'] if not h['replaced']] or [0]):.0f}"
          " ms otherwise (inside the hook's process; its start comes on top)")  # fmt: skip
    print(
        f"wall time of the three runs: {plain['wall']:.1f} s plain, {replaced['wall']:.1f} s "
        "with the hook"
    )
    print(
        f"the chat file keeps the CLI's snapshot: {replaced['chat_has_snapshot']}; holds "
        f"compactd's text: {replaced['chat_has_mark']}"
    )
    print(
        f"compressions: {plain['compressions']} plain, {replaced['compressions']} with the hook; "
        "compactd's text in the CLI's own compression requests: "
        f"{any(MARK in s for s in replaced['snapshot_input'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
