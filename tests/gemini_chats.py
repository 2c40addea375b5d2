"""Gemini CLI chats for the tests and the benchmark: the ones captured from the real CLI 0.61.0
(tests/data/gemini/) and synthetic ones written line by line as 0.61.0 writes them
(docs/gemini.md#chat-files): a metadata line and the session context as a ``$set.messages``,
records with ids, each ``gemini`` record written again with its tool calls, each tool result
twice, a resume writing the whole list back (results with their ``_response`` copies), a
compression as a ``$set.messages`` whose kept records come again under new ids, outputs masked
by a ``$set``, a ``$rewindTo``, a damaged line, a line of no known kind, a line still being
written; and the older ``.json`` of the same chat (docs/gemini.md#older-format).

``Chat.spans`` says, for each compression, the user's words, commands and files it dropped: what
a reader must find in its ledger.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "gemini"
CAPTURED = sorted(DATA.glob("gemini-cli-*.jsonl"))
# The older format (before 0.39): not captured from a CLI (0.61.0 no longer writes it) but built
# by tests/data/gemini/capture.py from the first capture, by the rules of that version's source.
(LEGACY,) = sorted(DATA.glob("session-*.json"))
CWD = "/work/pelican"
SESSION = "5b1c0e55-4f0e-4a57-9d0c-2c7f5f9d1e01"
CONTEXT_ID = "d04923d38bb0f6017037e74183378ef4"
ACK = "Got it. Thanks for the additional context!"


def session_context(cwd: str = CWD) -> str:
    return (
        "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n"
        f"My operating system is: linux\n- **Workspace Directories:**\n  - {cwd}\n"
        f"- **Directory Structure:**\n\n{cwd}/\n└───src/\n\n</session_context>"
    )


def _new_span() -> dict[str, list[str]]:
    return {"messages": [], "commands": [], "files": []}


@dataclass
class Chat:
    """A synthetic chat, line by line, and what each compression dropped."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    #: the CLI's list of records (as it would send them), each as last written
    current: list[dict[str, Any]] = field(default_factory=list)
    spans: list[dict[str, list[str]]] = field(default_factory=list)
    _span: dict[str, list[str]] = field(default_factory=_new_span)
    #: what the latest prompt's turn holds (a compression mid-turn keeps it)
    _turn: dict[str, list[str]] = field(default_factory=_new_span)
    tokens: int = 10_500
    #: the latest answer's tokens as written (what a reader's count must agree with)
    last_total: int = 0
    unknown: int = 0
    _n: int = 0
    model: str = "gemini-3-flash-preview"

    def _id(self) -> str:
        self._n += 1
        return f"{self._n:08x}-aaaa-4bbb-8ccc-{self._n:012x}"

    def _stamp(self) -> str:
        return f"2026-05-01T10:{self._n // 60 % 60:02d}:{self._n % 60:02d}.000Z"

    def _write(self, obj: dict[str, Any]) -> None:
        self.lines.append(obj)

    def _touch(self) -> None:
        self._write({"$set": {"lastUpdated": self._stamp()}})

    def meta(self) -> None:
        self._write({"sessionId": SESSION, "projectHash": "ab" * 32, "startTime": self._stamp(),
                     "lastUpdated": self._stamp(), "kind": "main"})  # fmt: skip
        ctx = {"id": CONTEXT_ID, "timestamp": self._stamp(), "type": "user",
               "content": [{"text": session_context()}]}  # fmt: skip
        self.current = [ctx]
        self._write({"$set": {"messages": [ctx]}})

    def _note(self, kind: str, what: str) -> None:
        self._span[kind].append(what)
        self._turn[kind].append(what)

    def user(self, text: str, *, hook_context: str = "") -> None:
        self._turn = _new_span()
        self._note("messages", text)
        content: list[dict[str, Any]] = [{"text": text}]
        if hook_context:
            content.append({"text": f"<hook_context>{hook_context}</hook_context>"})
        record = {"id": self._id(), "timestamp": self._stamp(), "type": "user", "content": content}
        self._write(record)
        self.current.append(record)
        self._touch()

    def _tokens(self, output: int) -> dict[str, int]:
        cached = self.tokens // 3
        total = self.tokens + output + 7
        self.last_total = total
        return {"input": self.tokens, "output": output, "cached": cached, "thoughts": 7,
                "tool": 0, "total": total}  # fmt: skip

    def answer(self, text: str) -> None:
        record = {"id": self._id(), "timestamp": self._stamp(), "type": "gemini", "content": text,
                  "thoughts": [], "tokens": self._tokens(len(text) // 4), "model": self.model}  # fmt: skip
        self._write(record)
        self.current.append(record)
        self._touch()
        self.tokens += 60

    def _call(self, text: str, name: str, args: dict[str, Any], output: str, status: str) -> None:
        ident = self._id()
        record = {"id": ident, "timestamp": self._stamp(), "type": "gemini", "content": text,
                  "thoughts": [], "tokens": self._tokens(20), "model": self.model}  # fmt: skip
        self._write(record)  # the answer first...
        self._touch()
        call_id = f"{name}__{name}_{1795855627000 + self._n}_0"
        result = [{"functionResponse": {"id": call_id, "name": name,
                                        "response": {"output": output}}}]  # fmt: skip
        call = {"id": call_id, "name": name, "args": args, "result": result, "status": status,
                "timestamp": self._stamp(), "displayName": name, "description": "",
                "resultDisplay": output[:40], "renderOutputAsMarkdown": False}  # fmt: skip
        rewritten = {**record, "toolCalls": [call]}
        self._write(rewritten)  # ...then written again, with its call
        answer = {"id": self._id(), "timestamp": self._stamp(), "type": "user",
                  "content": copy.deepcopy(result)}  # fmt: skip
        self._write(answer)  # and the result once more, as a user record
        self._touch()
        self.current += [rewritten, answer]
        self.tokens += len(output) // 4 + 40

    def shell(self, command: str, output: str, *, failed: bool = False) -> None:
        self._note("commands", command)
        shown = f"<untrusted_context>\nOutput: {output}\n"
        if failed:
            shown += "Exit Code: 1\n"
        shown += "Process Group PGID: 4242\n</untrusted_context>"
        self._call("Running it.", "run_shell_command",
                   {"command": command, "description": "a step"}, shown,
                   "error" if failed else "success")  # fmt: skip

    def read(self, path: str, content: str) -> None:
        self._note("files", path)
        self._call("Reading it.", "read_file", {"file_path": path}, content, "success")

    def write(self, path: str, content: str) -> None:
        self._note("files", path)
        self._call("Writing it.", "write_file", {"file_path": path, "content": content},
                   f"Successfully created and wrote to new file: {path}", "success")  # fmt: skip

    def resume(self) -> None:
        """A ``--resume``: its own start, then the whole list written back as the CLI loaded it
        (a tool result with a ``<id>_response`` copy beside its own record; tokens left out)."""
        self._write({"sessionId": SESSION, "projectHash": "ab" * 32, "startTime": self._stamp(),
                     "lastUpdated": self._stamp(), "kind": "main"})  # fmt: skip
        self._write({"$set": {"messages": [self.current[0]]}})
        self._write({"$set": {"sessionId": SESSION}})
        listed: list[dict[str, Any]] = []
        for record in self.current:
            if record["type"] == "gemini":
                parts: list[dict[str, Any]] = [{"text": record["content"]}] if isinstance(
                    record["content"], str) else list(record["content"])  # fmt: skip
                for call in record.get("toolCalls") or []:
                    parts.append({"functionCall": {"id": call["id"], "name": call["name"],
                                                   "args": call["args"]}})  # fmt: skip
                listed.append({"id": record["id"], "timestamp": self._stamp(), "type": "gemini",
                               "content": parts})  # fmt: skip
                for call in record.get("toolCalls") or []:
                    listed.append({"id": f"{record['id']}_response", "timestamp": self._stamp(),
                                   "type": "user", "content": call["result"]})  # fmt: skip
            else:
                listed.append({k: v for k, v in record.items() if k != "tokens"})
        self._write({"$set": {"messages": listed}})

    def compress(self, *, keep_latest_turn: bool = False) -> None:
        """A compression: the snapshot and the acknowledgement, then (mid-turn) the latest turn
        kept, written again under new ids."""
        kept: list[dict[str, Any]] = []
        if keep_latest_turn:
            at = max(i for i, r in enumerate(self.current)
                     if r["type"] == "user" and any("text" in p for p in r["content"]))  # fmt: skip
            for record in self.current[at:]:
                again = {k: v for k, v in record.items() if k not in ("tokens", "toolCalls")}
                if record["type"] == "gemini":
                    again["content"] = [{"text": record["content"]}] + [
                        {"functionCall": {"name": c["name"], "args": c["args"]}}
                        for c in record.get("toolCalls") or []
                    ]
                again["id"] = self._id()
                kept.append(again)
            for kind, items in self._turn.items():
                for item in items:
                    self._span[kind].remove(item)
        n = len(self.spans) + 1
        snapshot = {"id": self._id(), "timestamp": self._stamp(), "type": "user",
                    "content": [{"text": f"<state_snapshot>\n  <overall_goal>Snapshot {n}: go on "
                                          "with the export work.</overall_goal>\n"
                                          "</state_snapshot>"}]}  # fmt: skip
        ack = {"id": self._id(), "timestamp": self._stamp(), "type": "gemini",
               "content": [{"text": ACK}]}  # fmt: skip
        self.current = [self.current[0], snapshot, ack, *kept]
        self._write({"$set": {"messages": list(self.current), "lastUpdated": self._stamp()}})
        self.spans.append(self._span)
        self._span = copy.deepcopy(self._turn) if keep_latest_turn else _new_span()
        self.tokens = 10_800

    def mask(self) -> None:
        """Outputs masked in what the CLI sends (the same ids, other contents)."""
        masked = copy.deepcopy(self.current)
        for record in masked:
            for part in record.get("content") or []:
                if isinstance(part, dict) and "functionResponse" in part:
                    part["functionResponse"]["response"] = {"output": "[output masked]"}
        self._write({"$set": {"messages": masked}})

    def rewind(self) -> None:
        """``/rewind`` to the latest prompt: it and what followed are gone from the list."""
        at = max(i for i, r in enumerate(self.current) if r["type"] == "user")
        self._write({"$rewindTo": self.current[at]["id"]})
        self.current = self.current[:at]

    def unknown_line(self) -> None:
        self.unknown += 1
        self._write({"$future": {"what": "a line of a kind no Gemini CLI writes"}})

    def data(self, *, corrupt: bool = False, torn: bool = False) -> bytes:
        """The chat's bytes; ``corrupt``: a damaged line in the middle; ``torn``: a last line
        still being written (no newline)."""
        lines = [json.dumps(line, ensure_ascii=False).encode() for line in self.lines]
        if corrupt:
            lines.insert(len(lines) // 2, b'{"id": "broken", "type": "gem')
        out = b"\n".join(lines) + b"\n"
        if torn:
            out += b'{"id": "0000ffff-aaaa-4bbb-8ccc-00000000ffff", "timestamp": "2026-05-01T11:0'
        return out


def legacy(chat: Chat) -> bytes:
    """The same chat as Gemini CLI before 0.39 wrote it (docs/gemini.md#older-format): one
    pretty-printed object, each record as it stood last, tool results only in their calls, and
    an ``info`` record where the interactive CLI noted each compression."""
    records: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    snapshots: set[str] = set()
    for line in chat.lines:
        if "id" not in line:
            listed = line.get("$set", {}).get("messages", [])
            new = [m["id"] for m in listed[1:2] if "<state_snapshot>" in json.dumps(m)]
            if new and new[0] not in snapshots:
                snapshots.add(new[0])
                note = {"id": f"info-{len(order)}", "type": "info",
                        "timestamp": "2026-05-01T10:59:00.000Z",
                        "content": "Context compressed from 52% to 1%."}  # fmt: skip
                records[note["id"]] = note
                order.append(note["id"])
            continue
        if line["type"] == "user" and any("functionResponse" in p for p in line["content"]):
            continue
        if line["id"] not in records:
            order.append(line["id"])
        records[line["id"]] = line
    obj = {"sessionId": SESSION, "projectHash": "ab" * 32, "startTime": "2026-05-01T10:00:00.000Z",
           "lastUpdated": "2026-05-01T11:00:00.000Z",
           "messages": [records[i] for i in order], "kind": "main"}  # fmt: skip
    return json.dumps(obj, indent=2, ensure_ascii=False).encode()


def edge_chat() -> Chat:
    """One chat with every edge case: records rewritten by id, a resume writing the list back,
    outputs masked, a compression at a resume, a rewind, a compression mid-turn that keeps the
    turn under new ids, an unknown line, a failed command, BeforeAgent context on a prompt."""
    c = Chat()
    c.meta()
    c.user("Find why the pelican importer drops rows with a trailing comma")
    c.read(f"{CWD}/src/importer.py", "def parse_row(line):\n    return line.split(',')\n")
    c.shell("pytest -q tests/test_importer.py", "1 failed: test_trailing_comma", failed=True)
    c.answer("The importer splits on every comma, the last field is empty.")
    c.resume()
    c.mask()
    c.compress()
    c.user("Keep the old CSV dialect as it is; never change quoting",
           hook_context="compactd: the context holds 9,000 tokens")  # fmt: skip
    c.write("src/importer.py", "def parse_row(line):\n    return line.rstrip(',').split(',')\n")
    c.unknown_line()
    c.shell("pytest -q tests/test_importer.py", "3 passed")
    c.answer("Fixed.")
    c.user("Something I did not mean")
    c.rewind()
    c.user("Now write the changelog entry for the importer fix")
    c.shell("git log --oneline -3", "a1b2c3 importer: keep trailing commas")
    c.read("CHANGELOG.md", "# Changelog\n\n## 1.4\n- faster import\n")
    c.compress(keep_latest_turn=True)
    c.answer("The changelog entry is written.")
    return c


_PROGRAMS = (
    "pytest -q tests/test_{w}.py", "rg -n {w}_handler src/", "git diff --stat src/{w}.py",
    "make check-{w}", "ls -la src/{w}/", "npm run build:{w}", "cargo test {w}_roundtrip",
    "python scripts/{w}_report.py --since 3d", "go vet ./{w}/...",
)  # fmt: skip
# What the person asks, turn by turn (the words that tell one request from another are in the
# middle, as people write them).
_ASKS = (
    "Turn {t}: the {w} export drops {o} rows when the file is empty, fix that",
    "Turn {t}: why do the {w} totals differ from the {o} report since Monday?",
    "Turn {t}: rename {w}_{o} to {o}_{w} everywhere and update the tests",
    "Turn {t}: keep the {w} cache but never write {o} entries into it",
    "Turn {t}: add a {w} flag to the {o} command and document it in the README",
)
_WORDS = (
    "ledger", "invoice", "pelican", "kiwi", "harbor", "quartz", "meadow", "lantern", "cobalt",
    "saffron", "tundra", "walnut", "zephyr", "orchid", "basalt", "falcon", "juniper", "marble",
)  # fmt: skip


def long_chat(seed: int = 7, turns: int = 36) -> Chat:
    """A long session: the person's requests, commands (some failing), files read and written,
    a resume every five turns, and a compression every twelve turns, alternately at a resume
    (everything before it dropped) and in the middle of a turn (the turn kept)."""
    rng = random.Random(seed)
    c = Chat()
    c.meta()
    for turn in range(turns):
        word, other = rng.sample(_WORDS, 2)
        mid_turn = turn % 12 == 11 and (turn // 12) % 2 == 1
        c.user(rng.choice(_ASKS).format(t=turn, w=word, o=other))
        for _ in range(rng.randint(1, 3)):
            command = rng.choice(_PROGRAMS).format(w=f"{word}{turn}")
            failed = rng.random() < 0.2
            c.shell(command, f"{command}: {'FAILED' if failed else 'ok'} ({rng.randint(1, 99)} "
                    "lines)", failed=failed)  # fmt: skip
        if rng.random() < 0.5:
            c.read(f"src/{word}/{other}_{turn}.py", f"def export_{other}():\n    return {turn}\n")
        if rng.random() < 0.4:
            c.write(f"src/{word}/{other}_{turn}_new.py", f"def export_{other}(): return {turn}")
        if mid_turn:
            c.compress(keep_latest_turn=True)
        c.answer(f"The {word} export handles {other} now.")
        if turn % 5 == 4:
            c.resume()
        if turn % 12 == 11 and not mid_turn:
            c.resume()
            c.compress()
    c.user("That is all for today: list what is left to do")
    c.answer("Nothing is left but the changelog.")
    return c
