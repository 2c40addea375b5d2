"""The port holds (docs/agents.md): outside ``compactd/agents/`` no module reads an agent's line
format, every registered agent gives the port what it asks for, and a second agent's reader is
used wherever compactd reads an agent's file, chosen by the file's content."""

from __future__ import annotations

import ast
import hashlib
import importlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from compactd import port
from compactd.core.constants import DEFAULT_MODEL
from compactd.core.vocabulary import Vocabulary, vocabulary
from compactd.transcript.model import ParseReport, Record, record_from_dict

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "compactd"

# compactd's own transcript code may parse lines: the model that defines the parsers, the store
# that reads the session files compactd writes itself, and the port every agent's file is read
# through. Everything under compactd/agents/ is an agent's own.
ALLOWED = (
    "compactd/transcript/",
    "compactd/agents/",
    "compactd/port.py",
    "compactd/services/store.py",
)
# The functions that turn transcript bytes or lines into records.
PARSERS = frozenset(
    {"parse_lines", "parse_buffer", "read_buffer", "newest_first", "record_from_line", "line_uuid"}
)
# A bytes literal that starts with a JSON key or string ('"type"', '"assistant"'): looking for
# a field in raw lines is reading their format too.
RAW_KEY = re.compile(rb'^"[A-Za-z_]')
# An agent's reader module (its line format); ``compactd compact`` prints Claude Code's resume
# command (the import-linter contract names the same exception).
AGENT_MODULE = re.compile(r"^compactd\.agents\.\w+")
EXCEPTIONS = {
    ("compactd/cli/compact.py", "compactd.agents.claude_code.format"),
}


def violations(relative: str, source: str) -> list[str]:
    """Where the module at ``relative`` (a path under the repository) reads a line format."""
    found: list[str] = []
    tree = ast.parse(source)
    # Names bound by ``from compactd.transcript... import parse_lines`` (a parameter that happens
    # to be called ``newest_first`` is not a parser).
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("compactd.")
        for alias in node.names
        if alias.name in PARSERS
    }
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if alias.name in PARSERS:
                    found.append(f"{relative}:{line}: imports {alias.name} from {node.module}")
            if (relative, node.module) in EXCEPTIONS:
                continue
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if AGENT_MODULE.match(name):
                    found.append(f"{relative}:{line}: imports {name}, an agent's module")
                    break
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if AGENT_MODULE.match(alias.name):
                    found.append(f"{relative}:{line}: imports {alias.name}, an agent's module")
        elif isinstance(node, ast.Attribute) and node.attr in PARSERS:
            found.append(f"{relative}:{line}: uses {node.attr}")
        elif isinstance(node, ast.Name) and node.id in imported:
            found.append(f"{relative}:{line}: uses {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            if RAW_KEY.match(node.value):
                found.append(f"{relative}:{line}: looks for {node.value!r} in raw lines")
    return found


def _modules() -> Iterable[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if not relative.startswith(ALLOWED):
            yield relative, path


def test_no_module_outside_the_agents_reads_a_line_format() -> None:
    checked = 0
    found: list[str] = []
    for relative, path in _modules():
        found += violations(relative, path.read_text(encoding="utf-8"))
        checked += 1
    assert checked > 100, "the scan is expected to cover compactd's modules"
    assert not found, "read an agent's file through compactd.port instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from compactd.transcript.model import parse_buffer\n",
        "from compactd.transcript import model\nrecords = model.parse_lines(lines)\n",
        "import compactd.transcript.model as m\nm.newest_first(data)\n",
        "from compactd.agents.claude_code.format import CLAUDE_CODE\n",
        "from compactd.agents.claude_code import format as cc\n",
        "import compactd.agents.codex.format\n",
        "found = b'\"isCompactSummary\"' in line\n",
    ],
)
def test_the_scan_finds_each_way_of_reading_a_line_format(source: str) -> None:
    assert violations("compactd/engine/example.py", source)


def test_the_scan_passes_reading_through_the_port() -> None:
    source = "from compactd import port\nrecords = port.records(data)\nmark = b'\\n'\n"
    assert violations("compactd/engine/example.py", source) == []


# -- every registered agent -------------------------------------------------------------------


@pytest.mark.parametrize("agent", port.AGENTS, ids=lambda a: a.command)
def test_a_registered_agent_gives_the_port_everything(agent: port.Agent) -> None:
    package = importlib.import_module(f"compactd.agents.{port.INSTALLED[port.AGENTS.index(agent)]}")
    assert package.AGENT is agent
    fmt = agent.format()
    assert fmt.name and isinstance(fmt.compaction_marks, re.Pattern)
    assert callable(agent.main)
    assert all(callable(h) for h in agent.handlers().values())
    assert port.agent_for(agent.command) is agent
    # Its vocabulary is part of what the core reads tool calls with.
    mine, union = agent.vocabulary, vocabulary()
    assert mine.reads <= union.reads and mine.writes <= union.writes and mine.runs <= union.runs
    assert set(mine.file_args) <= set(union.file_args)


def test_codex_is_registered_through_the_same_port() -> None:
    assert port.INSTALLED == ("claude_code", "codex", "gemini")
    codex = port.agent_for("codex")
    assert codex is not None and codex.format().name == "Codex"
    assert {"exec_command", "shell", "local_shell"} <= vocabulary().runs
    assert "apply_patch" in vocabulary().writes


def test_exactly_one_format_reads_compactd_s_own_lines() -> None:
    assert [f.name for f in port.formats() if f.native] == ["Claude Code"]


def test_vocabularies_join_sets_and_keep_ordered_names_in_order() -> None:
    a = Vocabulary(reads=frozenset({"Read"}), file_args=("file_path", "path"))
    b = Vocabulary(reads=frozenset({"read_file"}), file_args=("absolute_path", "path"))
    both = a | b
    assert both.reads == {"Read", "read_file"}
    assert both.file_args == ("file_path", "path", "absolute_path")


# -- a second agent through the port ------------------------------------------------------------


class ChatFormat:
    """A made-up agent whose file is ``{"said": ..., "by": ...}`` lines."""

    name = "Chat"
    native = False
    compaction_marks = re.compile(rb'"compacted"')
    boundary_mark = re.compile(rb'"compacted"')

    def claims(self, head: bytes) -> bool:
        return head.startswith(b'{"said"')

    def records(self, lines: Iterable[bytes], report: ParseReport | None = None) -> list[Record]:
        out = []
        for line in lines:
            if not line.strip():
                continue
            said = msgspec.json.decode(line)
            role = "user" if said["by"] == "me" else "assistant"
            message: dict[str, Any] = {"role": role, "content": said["said"]}
            if "m" in said:
                message["model"] = said["m"]
            # The same line read again (a follower, the recall index) is the same record.
            uid = "chat-" + hashlib.sha256(line.strip()).hexdigest()[:16]
            out.append(record_from_dict({"type": role, "uuid": uid, "message": message}))
        return out

    def recognizes(self, records: Iterable[Record]) -> bool:
        return any((r.uuid or "").startswith("chat-") for r in records)

    def transcript(self, data: bytes, report: ParseReport | None = None) -> bytes:
        return b"".join(r.raw + b"\n" for r in self.records(data.split(b"\n"), report))

    def stream(self) -> ChatFormat:
        return self  # each line stands alone

    def feed(self, data: bytes, report: ParseReport | None = None) -> list[Record]:
        return self.records(data.split(b"\n"), report)

    def complete(self, data: bytes) -> int:
        return data.rfind(b"\n") + 1

    def recorded_limits(self, data: bytes) -> None:
        return None  # its model names are Claude's


CHAT = b'{"said": "fix the bug", "by": "me"}\n{"said": "done", "by": "it", "m": "%s"}\n' % (
    DEFAULT_MODEL.encode()
)


@pytest.fixture
def with_chat(monkeypatch: pytest.MonkeyPatch) -> None:
    """The made-up agent registered before Claude Code."""
    native = port.AGENTS[0].format()
    monkeypatch.setattr(port, "formats", lambda: (ChatFormat(), native))


def test_a_second_agent_s_file_is_read_by_its_own_reader(with_chat: None) -> None:
    assert port.detect(CHAT).name == "Chat"
    assert [r.entry.type for r in port.records(CHAT)] == ["user", "assistant"]
    assert port.latest_model(port.transcript(CHAT)) == DEFAULT_MODEL
    lines = port.transcript(CHAT).splitlines()
    assert [msgspec.json.decode(line)["type"] for line in lines] == ["user", "assistant"]


def test_claude_code_s_lines_are_still_read_as_they_are(with_chat: None) -> None:
    line = b'{"type":"user","uuid":"u1","message":{"role":"user","content":"hi"}}\n'
    assert port.detect(line).native
    assert port.transcript(line) is line
    report = ParseReport()
    assert [r.uuid for r in port.records(line + b"not json\n", report)] == ["u1"]
    assert report.skipped == 1


@pytest.mark.parametrize(
    "name,named",
    [
        ("s.jsonl", True),
        ("v1.2-s.jsonl", True),
        ("s.jsonl.bak", False),
        (".jsonl", False),
        ("rollout-2026-01-01T00-00-00-x.jsonl.zst", True),
        ("session-2026-04-01T09-30-c051a701.json", True),
    ],
)
def test_a_path_names_a_session_by_how_the_agents_name_theirs(name: str, named: bool) -> None:
    assert port.names_a_session(Path("/p") / name) is named
    assert port.session_suffixes() == ".jsonl or .jsonl.zst or .json"
