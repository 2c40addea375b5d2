"""Deterministic synthetic coding sessions in Claude Code's transcript shape.

Benchmarks, the demo and tests need sessions of a chosen size (e.g. 2,000 entries and about
180K tokens) with the features real ones have: prompts, responses split over several entries
(parallel tool calls with interleaved results), Read / Bash / Grep / Edit / Write calls with
large outputs, repeated reads of one file, todo updates, and usage on every response that
matches the context the response saw.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

_WORDS = (
    "parser token window cache summary boundary session daemon request entry budget "
    "compact result module import config value error retry stream handler test fixture "
    "buffer offset limit index state thread queue event loop frame header payload"
).split()


@dataclass
class _Builder:
    rng: random.Random
    cwd: str
    session_id: str
    model: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    parent: str | None = None
    context_chars: int = 0
    n: int = 0
    clock: float = 1_795_000_000.0

    def _uuid(self) -> str:
        self.n += 1
        return f"00000000-0000-4000-8000-{self.n:012d}"

    def _ts(self) -> str:
        self.clock += self.rng.uniform(0.5, 4.0)
        whole = int(self.clock)
        ms = int((self.clock - whole) * 1000)
        import time as _time

        return _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(whole)) + f".{ms:03d}Z"

    def _add(self, entry: dict[str, Any], chars: int) -> dict[str, Any]:
        uid = self._uuid()
        entry = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": "2.1.330",
            **entry,
            "uuid": uid,
            "timestamp": self._ts(),
        }
        self.parent = uid
        self.context_chars += chars
        self.entries.append(entry)
        return entry

    def text(self, words: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(words))

    def user(self, text: str) -> None:
        self._add({"type": "user", "message": {"role": "user", "content": text}}, len(text))

    def response(self, text: str | None, calls: list[tuple[str, dict[str, Any], str]]) -> None:
        """One model response: optional text, then tool calls, results interleaved."""
        msg_id = f"msg_{self.n:08d}{self.rng.randrange(1 << 30):08x}"
        blocks: list[dict[str, Any]] = []
        if text:
            blocks.append({"type": "text", "text": text})
        uses = []
        for name, inp, _ in calls:
            tid = f"toolu_{self.n:06d}_{self.rng.randrange(1 << 40):010x}"
            uses.append({"type": "tool_use", "id": tid, "name": name, "input": inp})
        # usage: what the API would have reported for this response
        prompt_tokens = max(1, math.ceil(self.context_chars / 4 * 4 / 3))
        output = 40 + sum(len(json.dumps(u["input"])) for u in uses) // 4 + len(text or "") // 4
        cached = int(prompt_tokens * 0.9)
        usage = {
            "input_tokens": prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": output,
        }
        parts: list[list[dict[str, Any]]] = []
        if blocks:
            parts.append(blocks)
        parts.extend([u] for u in uses)
        if not parts:
            parts = [[{"type": "text", "text": "Done."}]]
        results = {u["id"]: (calls[i][2], calls[i][0]) for i, u in enumerate(uses)}
        for part in parts:
            chars = sum(len(json.dumps(b)) for b in part)
            self._add(
                {
                    "type": "assistant",
                    "requestId": f"req_{msg_id}",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": self.model,
                        "content": part,
                        "stop_reason": "tool_use" if uses else "end_turn",
                        "usage": usage,
                    },
                },
                chars,
            )
            for b in part:
                if b.get("type") == "tool_use":
                    out, _ = results[b["id"]]
                    self._add(
                        {
                            "type": "user",
                            "message": {
                                "role": "user",
                                "content": [
                                    {"type": "tool_result", "tool_use_id": b["id"], "content": out}
                                ],
                            },
                        },
                        len(out),
                    )


def _file_body(rng: random.Random, path: str, lines: int) -> str:
    out = []
    for i in range(1, lines + 1):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 10)))
        out.append(f"{i:>6}\t    {words}")
    return "\n".join(out)


def make_session(
    *,
    entries: int = 2000,
    target_tokens: int = 180_000,
    seed: int = 7,
    cwd: str = "/home/dev/project",
    session_id: str = "synthetic-session",
    model: str = "claude-sonnet-4-5",
) -> list[dict[str, Any]]:
    """Build a session of about ``entries`` entries whose context is near ``target_tokens``."""
    rng = random.Random(seed)
    b = _Builder(rng=rng, cwd=cwd, session_id=session_id, model=model)
    # Average characters per tool result so the total lands near the target.
    per_result_chars = max(200, int(target_tokens * 3 / max(1, entries // 2)))
    files = [f"{cwd}/src/{w}_{i}.py" for i, w in enumerate(rng.sample(_WORDS, 12))]
    todo_round = 0
    while len(b.entries) < entries:
        b.user(f"Please {b.text(rng.randint(6, 18))}.")
        for _ in range(rng.randint(2, 6)):
            if len(b.entries) >= entries:
                break
            kind = rng.random()
            calls: list[tuple[str, dict[str, Any], str]] = []
            if kind < 0.35:
                path = rng.choice(files)
                lines = max(5, per_result_chars // 40)
                calls.append(("Read", {"file_path": path}, _file_body(rng, path, lines)))
            elif kind < 0.6:
                cmd = f"pytest -q tests/test_{rng.choice(_WORDS)}.py"
                out = "\n".join(b.text(8) for _ in range(max(2, per_result_chars // 50)))
                calls.append(("Bash", {"command": cmd, "description": "Run tests"}, out))
            elif kind < 0.72:
                # parallel calls in one response
                for _ in range(rng.randint(2, 3)):
                    path = rng.choice(files)
                    calls.append(
                        (
                            "Grep",
                            {"pattern": rng.choice(_WORDS), "path": path},
                            "\n".join(
                                f"{path}:{j}: {b.text(6)}" for j in range(per_result_chars // 80)
                            ),
                        )
                    )
            elif kind < 0.85:
                path = rng.choice(files)
                calls.append(
                    (
                        "Edit",
                        {"file_path": path, "old_string": b.text(5), "new_string": b.text(6)},
                        f"The file {path} has been updated.",
                    )
                )
            elif kind < 0.92:
                todo_round += 1
                todos = [
                    {
                        "content": b.text(4),
                        "status": rng.choice(["pending", "in_progress", "completed"]),
                        "activeForm": b.text(3),
                    }
                    for _ in range(3)
                ]
                calls.append(
                    ("TodoWrite", {"todos": todos}, "Todos have been modified successfully.")
                )
            b.response(b.text(rng.randint(5, 30)) if rng.random() < 0.6 else None, calls)
        b.response(b.text(rng.randint(10, 40)), [])
    return b.entries[:entries]


def to_jsonl(entries: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in entries)
