"""Codex rollouts for the tests and the benchmark: the two captured from the real CLI 0.171.0
(tests/data/codex/) and synthetic ones in the variants older CLIs write (docs/codex.md#format-variants-in-public-rollouts):
no ``ordinal``, usage only in ``event_msg`` ``token_count``, ``shell`` calls with an argv,
outputs as JSON with ``metadata.exit_code``, ``local_shell_call`` items, a remote compaction
whose ``message`` is empty and whose history holds an encrypted item, an old ``compacted`` line
without ``replacement_history``, a line of a type no Codex writes, and a line still being written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

CAPTURED = sorted((Path(__file__).resolve().parent / "data" / "codex").glob("codex-*.jsonl"))
CWD = "/work/pelican"


@dataclass
class Rollout:
    """A synthetic rollout, line by line, with what a reader must find in it."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    #: per compaction: the user's messages, commands and files its span held
    spans: list[dict[str, list[str]]] = field(default_factory=list)
    _span: dict[str, list[str]] = field(default_factory=lambda: _new_span())
    _n: int = 0
    unknown: int = 0

    def add(self, kind: str, payload: dict[str, Any]) -> None:
        self._n += 1
        stamp = f"2025-09-01T10:{self._n // 60:02d}:{self._n % 60:02d}.000Z"
        self.lines.append({"timestamp": stamp, "type": kind, "payload": payload})

    def meta(self) -> None:
        self.add("session_meta", {"id": "0198f0c2-1111-7222-8333-444455556666", "cwd": CWD,
                                  "cli_version": "0.46.0", "instructions": None})  # fmt: skip
        self.add("turn_context", {"cwd": CWD, "model": "gpt-5-codex", "approval_policy": "never"})

    def user(self, text: str) -> None:
        self._span["messages"].append(text)
        self.add("response_item", {"type": "message", "role": "user",
                                   "content": [{"type": "input_text", "text": text}]})  # fmt: skip
        self.add("event_msg", {"type": "user_message", "message": text, "images": []})

    def assistant(self, text: str) -> None:
        self.add("response_item", {"type": "message", "role": "assistant",
                                   "content": [{"type": "output_text", "text": text}]})  # fmt: skip

    def usage(self, tokens: int) -> None:
        last = {"input_tokens": tokens - 50, "cached_input_tokens": tokens // 2,
                "output_tokens": 50, "reasoning_output_tokens": 0, "total_tokens": tokens}  # fmt: skip
        self.add("event_msg", {"type": "token_count", "info": {
            "total_token_usage": last, "last_token_usage": last,
            "model_context_window": 272_000}})  # fmt: skip

    def shell(self, command: str, output: str, *, code: int = 0, call: str = "") -> None:
        call_id = call or f"call_{self._n}"
        self._span["commands"].append(command)
        self.add("response_item", {"type": "function_call", "name": "shell", "call_id": call_id,
                                   "arguments": json.dumps({"command": ["bash", "-lc", command],
                                                            "workdir": CWD})})  # fmt: skip
        self.add("event_msg", {"type": "exec_command_end", "call_id": call_id, "exit_code": code,
                               "aggregated_output": output})  # fmt: skip
        body = json.dumps({"output": output, "metadata": {"exit_code": code,
                                                           "duration_seconds": 0.1}})  # fmt: skip
        self.add("response_item", {"type": "function_call_output", "call_id": call_id,
                                   "output": body})  # fmt: skip

    def local_shell(self, argv: list[str], output: str) -> None:
        call_id = f"ls_{self._n}"
        self._span["commands"].append(" ".join(argv))
        self.add("response_item", {"type": "local_shell_call", "call_id": call_id,
                                   "status": "completed", "action": {"type": "exec",
                                                                     "command": argv}})  # fmt: skip
        self.add("response_item", {"type": "function_call_output", "call_id": call_id,
                                   "output": output})  # fmt: skip

    def patch(self, path: str, text: str) -> None:
        self._span["files"].append(path)
        patch = f"*** Begin Patch\n*** Add File: {path}\n+{text}\n*** End Patch\n"
        call_id = f"call_{self._n}"
        self.add("response_item", {"type": "function_call", "name": "apply_patch",
                                   "call_id": call_id,
                                   "arguments": json.dumps({"input": patch})})  # fmt: skip
        self.add("response_item", {"type": "function_call_output", "call_id": call_id,
                                   "output": json.dumps({"output": f"Success. Updated: A {path}",
                                                         "metadata": {"exit_code": 0}})})  # fmt: skip

    def reasoning(self) -> None:
        self.add("response_item", {"type": "reasoning", "summary": [],
                                   "encrypted_content": "gAAAA-opaque"})  # fmt: skip

    def unknown_line(self) -> None:
        self.unknown += 1
        self.add("future_kind", {"what": "a line type no Codex version is known to write"})

    def compact_remote(self) -> None:
        """A remote compaction (OpenAI's endpoint): no readable summary, an encrypted item."""
        kept = [{"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": m}]}
                for m in self._all_messages()]  # fmt: skip
        kept.append({"type": "compaction", "encrypted_content": "gAAAA-summary"})
        self.add("compacted", {"message": "", "replacement_history": kept})
        self.add("event_msg", {"type": "context_compacted"})
        self._close_span()

    def compact_old(self, summary: str) -> None:
        """An old local compaction: the summary, and no history in the line."""
        self.add("compacted", {"message": summary})
        self._close_span()

    def _all_messages(self) -> list[str]:
        return [m for span in [*self.spans, self._span] for m in span["messages"]]

    def _close_span(self) -> None:
        self.spans.append(self._span)
        self._span = _new_span()

    def data(self, *, corrupt: bool = False, torn: bool = False) -> bytes:
        """The rollout's bytes; ``corrupt``: a damaged line in the middle; ``torn``: a last line
        still being written (no newline)."""
        lines = [json.dumps(line).encode() for line in self.lines]
        if corrupt:
            lines.insert(len(lines) // 2, b'{"timestamp": "2025-09-01T10:00:00Z", "type": "resp')
        out = b"\n".join(lines) + b"\n"
        if torn:
            out += b'{"timestamp": "2025-09-01T11:00:00.000Z", "type": "response_item", "pay'
        return out


def _new_span() -> dict[str, list[str]]:
    return {"messages": [], "commands": [], "files": []}


def older_rollout() -> Rollout:
    """Two compactions in an older CLI's variant: a remote one and an old local one."""
    r = Rollout()
    r.meta()
    r.user("Find why the pelican importer drops rows with a trailing comma")
    r.reasoning()
    r.assistant("Looking at the importer.")
    r.shell("rg -n trailing_comma src/importer.py", "src/importer.py:41: if trailing_comma:")
    r.usage(18_000)
    r.shell("sed -n 30,60p src/importer.py", "def parse_row(line):\n    ...")
    r.usage(21_000)
    r.unknown_line()
    r.shell("pytest -q tests/test_importer.py", "1 failed: test_trailing_comma", code=1)
    r.usage(24_000)
    r.compact_remote()
    r.user("Keep the old CSV dialect as it is; never change quoting")
    r.patch("src/importer.py", "    line = line.rstrip(',')")
    r.local_shell(["pytest", "-q", "tests/test_importer.py"], "3 passed")
    r.usage(15_000)
    r.assistant("The importer keeps rows with a trailing comma now.")
    r.usage(16_000)
    r.compact_old("The importer was fixed: trailing commas are stripped before parsing.")
    r.user("Now write the changelog entry")
    r.assistant("Writing it.")
    r.usage(9_000)
    return r


def compressed(data: bytes) -> bytes:
    """A rollout as Codex rewrites an idle one (``.jsonl.zst``)."""
    return zstandard.ZstdCompressor(level=3).compress(data)


_PROGRAMS = (
    "pytest -q tests/test_{w}.py",
    "rg -n {w}_handler src/",
    "git diff --stat src/{w}.py",
    "make check-{w}",
    "sed -n 10,80p src/{w}.py",
    "ls -la src/{w}/",
    "npm run build:{w}",
    "cargo test {w}_roundtrip",
    "python scripts/{w}_report.py --since 3d",
    "go vet ./{w}/...",
)
_WORDS = (
    "ledger",
    "invoice",
    "pelican",
    "kiwi",
    "harbor",
    "quartz",
    "meadow",
    "lantern",
    "cobalt",
    "saffron",
    "tundra",
    "walnut",
    "zephyr",
    "orchid",
    "basalt",
    "falcon",
    "juniper",
    "marble",
)


def long_rollout(seed: int = 7, turns: int = 36) -> Rollout:
    """A long session in an older CLI's variant: many commands (some failing), patches to many
    files, the person's requests, and a compaction every twelve turns; the remote ones keep
    every message, the local ones only the latest three (Codex keeps the user's messages up to a
    budget: the older ones are what compactd gives back)."""
    import random

    rng = random.Random(seed)
    r = Rollout()
    r.meta()
    tokens = 12_000
    for turn in range(turns):
        word, other = rng.sample(_WORDS, 2)
        r.user(f"Turn {turn}: make the {word} export handle {other} records, and never drop "
               f"the {other} totals when the {word} file is empty")  # fmt: skip
        r.reasoning()
        for _ in range(rng.randint(1, 3)):
            command = rng.choice(_PROGRAMS).format(w=f"{word}{turn}")
            code = 1 if rng.random() < 0.2 else 0
            r.shell(command, f"{command}: {'FAILED' if code else 'ok'} ({rng.randint(1, 99)} lines)",
                    code=code)  # fmt: skip
            tokens += rng.randint(800, 3_000)
            r.usage(tokens)
        if rng.random() < 0.6:
            r.patch(f"src/{word}/{other}_{turn}.py", f"def export_{other}(): return {turn}")
        r.assistant(f"The {word} export handles {other} now.")
        tokens += 400
        r.usage(tokens)
        if turn % 12 == 11:
            if (turn // 12) % 2 == 0:
                r.compact_remote()
            else:
                _compact_keeping_latest(r, 3, f"Summary: the {word} export work goes on.")
            tokens = 14_000
    return r


def _compact_keeping_latest(r: Rollout, keep: int, summary: str) -> None:
    """A local compaction (0.171-style) whose history keeps only the latest user messages."""
    prefix = ("Another language model started to solve this problem and produced a summary of "
              "its thinking process. use the information in this summary to assist with your "
              "own analysis:\n")  # fmt: skip
    kept = [{"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": m}]}
            for m in r._all_messages()[-keep:]]  # fmt: skip
    kept.append({"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": prefix + summary}]})  # fmt: skip
    r.add("compacted", {"message": prefix + summary, "replacement_history": kept})
    r._close_span()
