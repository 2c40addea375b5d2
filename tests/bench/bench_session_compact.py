"""Benchmark of ``compactd claude-code session-compact``: what each answer keeps, its size, its time.

Run: ``.venv/bin/python tests/bench/bench_session_compact.py``. Figures, not a pass/fail test.

Cases: every compaction in ``tests/data/transcripts`` (the span before each boundary, as Claude
Code's ``session.compact`` event gives it: ``tests/cc_rows.py``), each fixture without a
compaction compacted at its end, and synthetic sessions (``compactd.cli.synthetic``) of 40K to
180K tokens. Each case is answered three ways:

- ``prepared``: a summary prepared in the background up to four fifths of the span (what
  ``compactd mcp`` keeps when the count reaches the start level), written by tests/emulator's
  model (it quotes the user's messages, none of the files or commands), then the rows after it;
- ``offline``: compactd's offline summary (``COMPACTD_SUMMARIZER=offline``);
- ``claude+compactd``: a Claude Code summary that keeps none of the user's words, files or
  commands, with compactd's row added (the kept tail is then Claude Code's: its last two rows).

For each: the share of the span's user messages, files and commands the answer keeps (the
survival ledger's check over every row of the answer: targets 100 / 100 / >= 95%), the summary's
size (target <= 15,000 tokens), the kept tail against the conversation (target <= 1/4), and the
time to answer: in the process (the answer alone) and the whole command (interpreter start and
imports included), beside ``python -c pass`` in the same run (target <= 100 ms); the prepared
calls are timed again with ``compactd mcp`` running (``prepared, warm``), which answers them in
its own process, as the plugin has it beside the session. The command is
the one the plugin's module runs, ``compactd claude-code session-compact``, as a user has it:
this checkout installed by uv into a venv of its own (bytecode compiled, as pip and pipx do).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from compactd.agents.claude_code.services.compact import answer  # noqa: E402
from compactd.agents.claude_code.services.prepared import Prepared, write_prepared  # noqa: E402
from compactd.agents.claude_code.services.rows import rows_tokens  # noqa: E402
from compactd.agents.claude_code.services.warm import folder_key, socket_dir  # noqa: E402
from compactd.cli.synthetic import make_session, to_jsonl  # noqa: E402
from compactd.core.agent_gauge import gauge  # noqa: E402
from compactd.core.ledger import build_ledger, check_summary  # noqa: E402
from compactd.core.view import main_thread  # noqa: E402
from compactd.transcript.model import Record, parse_lines  # noqa: E402
from tests.cc_rows import request, rows_of  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.emulator.script import default_summary  # noqa: E402

RUNS = 5  # whole-command runs per case and mode (the median is printed)
SYNTHETIC = [(300, 40_000, 1), (900, 120_000, 2), (2000, 180_000, 3)]
CC_SUMMARY = "This session is being continued from a previous conversation.\nSummary: the user asked for changes to the code."


@dataclass
class Case:
    name: str
    records: list[Record]


def _cases(tmp: Path) -> list[Case]:
    cases: list[Case] = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        with path.open("rb") as fh:
            records = list(parse_lines(fh))
        starts = [0]
        for i, r in enumerate(records):
            if r.entry.is_compact_boundary:
                span = records[starts[-1] : i]
                if len(rows_of(span)) >= 4:
                    cases.append(Case(f"{path.name[:34]} #{len(starts)}", span))
                starts.append(i)
        if len(starts) == 1:
            cases.append(Case(f"{path.name[:34]} (end)", records))
    for entries, tokens, seed in SYNTHETIC:
        source = tmp / f"synthetic-{tokens}.jsonl"
        source.write_bytes(to_jsonl(make_session(entries=entries, target_tokens=tokens, seed=seed)))
        with source.open("rb") as fh:
            cases.append(
                Case(f"synthetic {tokens // 1000}K, {entries} entries", list(parse_lines(fh)))
            )
    return cases


def _kept(records: list[Record], rows: list[dict[str, object]]) -> tuple[float, float, float]:
    """The shares of the span's user messages, commands and files the answer's rows keep."""
    ledger = build_ledger(main_thread(records))
    missing = check_summary(
        ledger,
        "\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
        + "\n"
        + "\n".join(str(r.get("text", "")) for r in rows),
    )

    def share(total: int, left: int) -> float:
        return 1.0 if total == 0 else (total - left) / total

    return (
        share(len(ledger.human), len(missing.messages)),
        share(len(ledger.commands), len(missing.commands)),
        share(len(ledger.files), len(missing.files)),
    )


def _prepare(data: Path, records: list[Record], rows: list[dict[str, object]]) -> None:
    """A summary prepared up to four fifths of the span, by the emulator's model."""
    at = rows[int(len(rows) * 0.8)]["handle"]
    upto = next(i for i, r in enumerate(records) if r.uuid == at)
    body = {
        "messages": [
            {"role": r["role"], "content": str(r.get("text") or "")}
            for r in rows_of(records[: upto + 1])
            if r.get("text")
        ]
    }
    text = default_summary(body)
    # The window compactd mcp's engine records beside it: the model's effective window.
    model = next(
        (
            r.entry.message.model
            for r in reversed(records)
            if r.entry.type == "assistant" and r.entry.message and r.entry.message.model
        ),
        None,
    )
    window = gauge(0, model, {}).status.effective_window
    write_prepared(
        data,
        Prepared(
            session_id="bench",
            after="",
            snapshot_uuid=str(at),
            summary=text,
            prepared_at=time.time(),
            window=window,
        ),
    )


def _installed(root: Path) -> list[str]:
    """The command the plugin's module runs, as a user has it: the ``compactd`` console script
    of compactd installed (not editable, bytecode compiled) in a venv of its own, by uv from
    this checkout; ``python -m compactd`` of this venv where uv is missing or fails."""
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    venv = root / "user-venv"
    python = str(venv / "bin" / "python")
    try:
        for step in (
            [uv, "venv", "-q", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "-q", "--python", python, "--compile-bytecode", str(ROOT)],
        ):
            subprocess.run(step, check=True, capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"(no user install: {exc}; timing python -m compactd of this venv)")
        return [sys.executable, "-m", "compactd"]
    return [str(venv / "bin" / "compactd")]


def _whole_ms(command: list[str], body: bytes, env: dict[str, str]) -> float:
    times = []
    for i in range(RUNS + 1):
        start = time.perf_counter()
        subprocess.run(
            [*command, "claude-code", "session-compact"],
            input=body,
            env=env,
            capture_output=True,
            check=True,
        )
        if i:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


WARM = "prepared, warm"


def _warm_server(command: list[str], env: dict[str, str], data: Path) -> subprocess.Popen[bytes]:
    """``compactd mcp`` with the summarizer of ``env``, once its socket is there."""
    mcp = subprocess.Popen(
        [*command, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    pattern = f"{folder_key(data, os.getcwd())}-*.sock"
    for _ in range(1200):  # the MCP SDK's imports: seconds on a busy machine
        if list(socket_dir().glob(pattern)):
            return mcp
        time.sleep(0.1)
    mcp.kill()
    raise SystemExit("compactd mcp opened no socket")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "data" / "compactd"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTD", "ANTHROPIC"))}
        base["XDG_DATA_HOME"] = str(root / "data")
        modes = {
            "prepared": {**base, "COMPACTD_SUMMARIZER": "anthropic", "ANTHROPIC_API_KEY": "x"},
            "offline": {**base, "COMPACTD_SUMMARIZER": "offline"},
            "claude+compactd": base,
        }
        command = _installed(root)
        python = str(Path(command[0]).with_name("python")) if len(command) == 1 else sys.executable
        bare = statistics.median(
            [_time(lambda: subprocess.run([python, "-c", "pass"], check=True)) for _ in range(RUNS)]
        )
        print(f"python -c pass: {bare:.0f} ms (median of {RUNS}); targets: kept 100/100/>=95%, "
              "summary <= 15,000 tokens, tail <= 25%, prepared answer <= 100 ms\n")  # fmt: skip
        header = f"{'case':<44} {'mode':<16} {'msgs':>5} {'cmds':>5} {'files':>5} {'summary':>8} {'tail':>5} {'in-proc':>8} {'command':>8}"
        print(header)
        totals: dict[str, list[tuple[float, float, float, int, float, float, float]]] = {
            m: [] for m in [*modes, WARM]
        }
        warm_cases: list[tuple[Case, list[dict[str, object]], bytes, tuple[Any, ...]]] = []
        for case in _cases(root):
            rows = rows_of(case.records)
            for mode, env in modes.items():
                claude_code = None
                if mode == "claude+compactd":
                    claude_code = {
                        "messages": [
                            {
                                "role": "user",
                                "text": CC_SUMMARY,
                                "toolUses": [],
                                "handle": "cc-summary",
                            },
                            *rows[-2:],
                        ]
                    }
                if mode == "prepared":
                    _prepare(data, case.records, rows)
                body = request(
                    case.records, session_id="bench", trigger="auto", claude_code=claude_code
                )
                saved = dict(os.environ)
                os.environ.clear()
                os.environ.update(env)
                try:
                    start = time.perf_counter()
                    result = answer(body, data, env)
                    in_proc = (time.perf_counter() - start) * 1000
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
                out = result.rows if result.rows else []
                if not out:
                    print(f"{case.name:<44} {mode:<16} answered {result.body}")
                    continue
                m, k, f = _kept(case.records, out)
                summary_tokens = result.summary_chars // 4
                before = rows_tokens(rows)
                tail = result.tokens_kept / before if before else 0.0
                whole = _whole_ms(command, body, env)
                totals[mode].append((m, k, f, summary_tokens, tail, in_proc, whole))
                if mode == "prepared":
                    warm_cases.append((case, rows, body, (m, k, f, summary_tokens, tail, in_proc)))
                print(
                    f"{case.name:<44} {mode:<16} {m:>5.0%} {k:>5.0%} {f:>5.0%} {summary_tokens:>8,} {tail:>5.0%} {in_proc:>6.0f}ms {whole:>6.0f}ms"
                )
        # The same calls with compactd mcp running beside the session, as the plugin starts it:
        # it answers them warm (docs/claude-code.md#the-seam).
        mcp = _warm_server(command, modes["prepared"], data)
        try:
            for case, rows, body, stats in warm_cases:
                _prepare(data, case.records, rows)
                whole = _whole_ms(command, body, modes["prepared"])
                totals[WARM].append((*stats, whole))
                print(f"{case.name:<44} {WARM:<16} {'':>34} {stats[5]:>6.0f}ms {whole:>6.0f}ms")
        finally:
            assert mcp.stdin is not None
            mcp.stdin.close()
            mcp.wait(timeout=60)
        print()
        for mode, got in totals.items():
            if not got:
                continue
            worst = [min(x[i] for x in got) for i in range(3)]
            tail = "Claude Code's" if mode == "claude+compactd" else "compactd's"
            print(
                f"{mode:<16} worst kept: messages {worst[0]:.0%}, commands {worst[1]:.0%}, files {worst[2]:.0%}; "
                f"largest summary {max(x[3] for x in got):,} tokens; largest tail ({tail}) {max(x[4] for x in got):.0%}; "
                f"answer: median {statistics.median(x[5] for x in got):.0f} ms in the process, "
                f"{statistics.median(x[6] for x in got):.0f} ms the whole command ({statistics.median(x[6] for x in got) - bare:.0f} ms past a bare python)"
            )


def _time(fn: object) -> float:
    start = time.perf_counter()
    assert callable(fn)
    fn()
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    main()
