"""The agents compactd works inside, side by side: Claude Code's transcripts, Codex's rollouts and
Gemini CLI's chats; the count, what each compaction dropped, and recall of each dropped item from
a few of its words (docs/codex.md#figures, docs/gemini.md#figures).

Run: ``.venv/bin/python tests/bench/bench_agents.py``. For every file, read as compactd's hooks
and ``compactd mcp`` read it (through the port, the recall index on disk):

- **count**: compactd's count of the context against the file's own last record of it
  (Codex: the last ``token_count``'s ``last_token_usage.total_tokens``; Gemini CLI: the last
  answer's ``tokens.total``; Claude Code: the last response's usage), and the part compactd
  estimates beyond it;
- **ledger**: per compaction, the user messages, commands and files of the span it replaced,
  and how many of each its own summary (for Codex: what it keeps, the user's messages and the
  summary; for Gemini CLI: its snapshot) left out: what compactd hands back;
- **recall**: each item left out searched by a few of its words (a command's program and
  its longest argument, a file's name, four words of a message), found when a hit among the
  first eight holds it.

Files: the two rollouts captured from Codex CLI 0.171.0 (tests/data/codex), synthetic edge
cases (the captured rollout compressed as ``.jsonl.zst``, an older CLI's variant with a remote
compaction whose summary is encrypted and an old compaction line without history, with a
damaged line, a line of an unknown type and a last line still being written); the two chats
captured from Gemini CLI 0.61.0 and the older ``.json`` built from one of them
(tests/data/gemini), a synthetic chat with every edge case (records rewritten by id, a resume
writing the list back, masked outputs, a rewind, compressions at a resume and mid-turn, damaged,
unknown and torn lines) in both formats, and long synthetic sessions of both agents; and, as
the baseline, Claude Code's transcripts in tests/data/transcripts. Target: recall >= 95%.
Figures, not a pass/fail test.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from compactd import port  # noqa: E402
from compactd.core.handback import hand_back, last_compaction  # noqa: E402
from compactd.core.outlook import outlook  # noqa: E402
from compactd.core.recall_words import parse_query  # noqa: E402
from compactd.services.recall_index import RecallIndex  # noqa: E402
from compactd.transcript.model import ParseReport  # noqa: E402
from tests.codex_rollouts import CAPTURED, compressed, long_rollout, older_rollout  # noqa: E402
from tests.gemini_chats import CAPTURED as GEMINI_CAPTURED  # noqa: E402
from tests.gemini_chats import LEGACY, edge_chat, legacy, long_chat  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = sorted((ROOT / "tests" / "data" / "transcripts").glob("*.jsonl"))
RECALL_TARGET = 0.95
HITS = 8


@dataclass
class Figures:
    name: str
    agent: str
    lines: int = 0
    skipped: int = 0
    exact: int = 0
    recorded: int | None = None
    estimated: int = 0
    compactions: int = 0
    totals: list[int] = field(default_factory=lambda: [0, 0, 0])
    dropped: list[int] = field(default_factory=lambda: [0, 0, 0])
    tried: int = 0
    found: int = 0
    misses: list[str] = field(default_factory=list)
    ms: float = 0.0


def _recorded(data: bytes) -> int | None:
    """The file's own last record of the context: Codex's last token count, Gemini CLI's last
    answer's total, or the last usage a Claude Code response reported."""
    if data.startswith(b"\x28\xb5\x2f\xfd"):
        import zstandard

        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    if data.lstrip().startswith(b"{\n"):  # an older Gemini CLI chat: one object
        answers = [m for m in json.loads(data)["messages"] if m.get("tokens")]
        return int(answers[-1]["tokens"]["total"]) if answers else None
    for raw in reversed(data.splitlines()):
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict):
            continue
        if line.get("type") == "gemini" and isinstance(line.get("tokens"), dict):
            return int(line["tokens"].get("total") or 0) or None
        payload = line.get("payload")
        if isinstance(payload, dict) and payload.get("type") == "token_count":
            last = (payload.get("info") or {}).get("last_token_usage") or {}
            if last.get("total_tokens"):
                return int(last["total_tokens"])
        message = line.get("message") if isinstance(line, dict) else None
        if line.get("type") == "assistant" and isinstance(message, dict):
            usage = message.get("usage")
            if isinstance(usage, dict) and message.get("model") != "<synthetic>":
                total = sum(
                    usage.get(k) or 0
                    for k in ("input_tokens", "cache_creation_input_tokens",
                              "cache_read_input_tokens", "output_tokens")
                )  # fmt: skip
                if total:
                    return int(total)
    return None


def _words(text: str, n: int) -> str:
    """A few words from the middle of ``text``: what a model would remember of it."""
    words = re.findall(r"[A-Za-z0-9_./-]{3,}", text)
    if len(words) <= n:
        return " ".join(words)
    start = (len(words) - n) // 2
    return " ".join(words[start : start + n])


def _command_words(command: str) -> str:
    """A command as a model recalls it: the program and its most telling argument."""
    words = command.split()
    return " ".join([words[0], max(words[1:], key=len)]) if len(words) > 1 else command


def measure(name: str, agent: str, path: Path, data_dir: Path) -> Figures:
    out = Figures(name, agent)
    started = time.perf_counter()
    data = path.read_bytes()
    report = ParseReport()
    records = port.records(port.complete(data), report)
    out.lines, out.skipped = report.lines, report.skipped
    status = outlook(records, {}).gauge.status
    out.exact, out.estimated, out.recorded = (
        status.exact_tokens,
        status.estimated_tokens,
        _recorded(data),
    )

    items: list[tuple[str, str, str]] = []  # (kind, what, query)
    for i, record in enumerate(records):
        if not (record.entry.type == "user" and record.entry.is_compact_summary):
            continue
        compaction = last_compaction(records[: i + 1])
        if compaction is None:
            continue
        out.compactions += 1
        back = hand_back(compaction, limit=10**9)
        for k, (total, left) in enumerate(zip(back.totals, back.counts, strict=True)):
            out.totals[k] += total
            out.dropped[k] += left
        m = back.missing
        items += [("message", x.text, _words(x.text, 4)) for x in m.messages if not x.carried]
        items += [("command", x.command, _command_words(x.command)) for x in m.commands]
        items += [("file", x.path, Path(x.path).name) for x in m.files]
    with RecallIndex(data_dir, path) as index:
        index.refresh()
        for kind, what, query in items:
            out.tried += 1
            found = index.search(parse_query(query), HITS).found
            key = Path(what).name if kind == "file" else what[:60]
            if any(key.casefold() in hit.entry.text.casefold() for hit in found):
                out.found += 1
            else:
                out.misses.append(f"{kind}: {query!r}")
    out.ms = (time.perf_counter() - started) * 1000
    return out


def _files(tmp: Path) -> list[tuple[str, str, Path]]:
    files: list[tuple[str, str, Path]] = [(p.name.split("__")[1], "Codex", p) for p in CAPTURED]
    packed = tmp / "rollout-captured.jsonl.zst"
    packed.write_bytes(compressed(CAPTURED[0].read_bytes()))
    files.append(("captured, .jsonl.zst", "Codex", packed))
    old = older_rollout()
    edge = tmp / "rollout-older-variant.jsonl"
    edge.write_bytes(old.data(corrupt=True, torn=True))
    files.append(("older CLI: remote + old compaction, damaged/unknown/torn lines", "Codex", edge))
    for seed in (7, 8, 9):
        long = tmp / f"rollout-long-{seed}.jsonl"
        long.write_bytes(long_rollout(seed, turns=40).data())
        files.append((f"long synthetic session (seed {seed}), 3 compactions", "Codex", long))
    files += [
        (p.name.split("__")[1].removesuffix(".jsonl"), "Gemini CLI", p) for p in GEMINI_CAPTURED
    ]
    files.append(("older .json (built from the capture)", "Gemini CLI", LEGACY))
    chat = edge_chat()
    edge = tmp / "session-edge.jsonl"
    edge.write_bytes(chat.data(corrupt=True, torn=True))
    files.append(("edges: rewrites, $set lists, rewind, 2 compressions, torn", "Gemini CLI",
                  edge))  # fmt: skip
    old_edge = tmp / "session-edge.json"
    old_edge.write_bytes(legacy(chat))
    files.append(("the same edges, older .json", "Gemini CLI", old_edge))
    for seed in (7, 8, 9):
        long = tmp / f"session-long-{seed}.jsonl"
        long.write_bytes(long_chat(seed, turns=40).data())
        files.append((f"long synthetic chat (seed {seed}), 3 compressions", "Gemini CLI", long))
    files += [(p.stem[:40], "Claude Code", p) for p in CLAUDE]
    return files


def main() -> int:
    rows: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="bench-agents-") as tmp:
        for name, agent, path in _files(Path(tmp)):
            rows.append(measure(name, agent, path, Path(tmp) / "data"))
    print(f"{'file':<64} {'agent':<11} {'lines':>6} {'skip':>4}  {'count':>8} {'recorded':>8} "
          f"{'est.':>6}  {'comp':>4}  {'msgs left/all':>13} {'cmds':>9} {'files':>9}  "
          f"{'recall':>9} {'ms':>6}")  # fmt: skip
    for r in rows:
        recorded = f"{r.recorded:,}" if r.recorded is not None else "-"
        ratio = f"{r.found}/{r.tried}" if r.tried else "-"
        print(f"{r.name:<64} {r.agent:<11} {r.lines:>6} {r.skipped:>4}  {r.exact:>8,} {recorded:>8} "
              f"{r.estimated:>6,}  {r.compactions:>4}  {r.dropped[0]:>6}/{r.totals[0]:<6} "
              f"{r.dropped[1]:>4}/{r.totals[1]:<4} {r.dropped[2]:>4}/{r.totals[2]:<4}  "
              f"{ratio:>9} {r.ms:>6.0f}")  # fmt: skip
    print()
    for agent in ("Codex", "Gemini CLI", "Claude Code"):
        mine = [r for r in rows if r.agent == agent]
        agree = sum(1 for r in mine if r.recorded is not None and r.exact == r.recorded)
        known = sum(1 for r in mine if r.recorded is not None)
        tried = sum(r.tried for r in mine)
        found = sum(r.found for r in mine)
        share = found / tried if tried else 1.0
        print(
            f"{agent}: count equals the file's last record in {agree}/{known} files; "
            f"{sum(r.compactions for r in mine)} compactions; dropped "
            f"{'/'.join(str(sum(r.dropped[k] for r in mine)) for k in range(3))} "
            "(messages/commands/files); recalled "
            f"{found}/{tried} = {share:.1%} (target {RECALL_TARGET:.0%})"
        )
        for r in mine:
            for miss in r.misses[:5]:
                print(f"  missed in {r.name}: {miss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
