"""What survives a compaction: synthetic sessions and the measure, for the fidelity benchmark
(``tests/bench/bench_fidelity.py``) and the end-to-end tests of the ledger (no tests here).

The measure is issue 20's rule: look only at what the model sees next (``session/messages``
after ``compact/full``), whitespace collapsed and case folded, and count an item when its
normalized text appears there: a user message by its first 60 characters, a file by its
basename, a shell command by its first 40 characters (a tool call the model is shown counts
with its arguments as they are, not JSON-escaped: a command kept verbatim in a call is there,
quotes and newlines included). Items are taken from the entries being
compacted with rules of this module's own (not compactd's classifier): a user message is a user
turn with text that is neither meta, nor a tool result, nor a harness message (those start with
a tag, an interruption marker or the local-command caveat); files are the paths tool calls name;
commands are the Bash calls.

The sessions are written to stress what summaries lose: long pastes, harness messages, hundreds
of shell commands, Grep / Glob paths, multi-line requests. ``cc_like_summary`` writes a summary
the way Claude Code's do on such sessions (the task paraphrased, some files, a few messages
quoted in part, no commands), for the emulator to answer with.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import SessionBuilder

USER_PREFIX_CHARS = 60
COMMAND_PREFIX_CHARS = 40

_HARNESS_STARTS = ("<", "[Request interrupted", "Caveat:")


def normalize(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass
class Items:
    """What must survive, by the measure's own rules."""

    messages: list[str]
    files: list[str]
    commands: list[str]


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.append(str(block.get("text", "")))
    return out


def items_of(entries: Iterable[dict[str, Any]]) -> Items:
    messages: list[str] = []
    files: list[str] = []
    commands: list[str] = []
    for e in entries:
        if e.get("isSidechain") or e.get("isMeta") or e.get("isCompactSummary"):
            continue
        message = e.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if e.get("type") == "user":
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content
            ):
                continue
            text = "\n".join(_texts(content)).strip()
            if text and not text.startswith(_HARNESS_STARTS):
                messages.append(text)
        elif e.get("type") == "assistant" and isinstance(content, list):
            for block in content:
                if not isinstance(block, dict) or block.get("type") != "tool_use":
                    continue
                args = block.get("input") or {}
                for key in ("file_path", "notebook_path", "path"):
                    value = args.get(key)
                    if isinstance(value, str) and value:
                        files.append(os.path.basename(value.rstrip("/")) or value)
                        break
                if block.get("name") == "Bash" and isinstance(args.get("command"), str):
                    commands.append(args["command"])
    return Items(
        list(dict.fromkeys(messages)), list(dict.fromkeys(files)), list(dict.fromkeys(commands))
    )


def _strings(value: Any) -> list[str]:
    """Every string inside a tool call's arguments, unescaped."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def view_text(messages: Sequence[dict[str, Any]]) -> str:
    """Every text the model is shown in an API view (``session/messages``)."""
    out: list[str] = []

    def walk(content: Any) -> None:
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    if block.get("type") == "text":
                        out.append(str(block.get("text", "")))
                    elif block.get("type") == "tool_result":
                        walk(block.get("content"))
                    elif block.get("type") == "tool_use":
                        # The model reads a tool call's arguments as they are: a command with
                        # quotes or newlines is no less there because JSON escapes them.
                        out.append(json.dumps(block.get("input"), ensure_ascii=False))
                        out.extend(_strings(block.get("input")))

    for m in messages:
        walk(m.get("content"))
    return "\n".join(out)


@dataclass
class Recall:
    found: int
    total: int

    @property
    def share(self) -> float:
        return self.found / self.total if self.total else 1.0


def recalls(items: Items, view: str) -> tuple[Recall, Recall, Recall]:
    """User messages, files and commands of ``items`` found in ``view`` by the rule."""
    hay = normalize(view)
    msgs = sum(1 for m in items.messages if normalize(m)[:USER_PREFIX_CHARS] in hay)
    files = sum(1 for f in items.files if f.casefold() in hay)
    cmds = sum(1 for x in items.commands if normalize(x)[:COMMAND_PREFIX_CHARS] in hay)
    return (
        Recall(msgs, len(items.messages)),
        Recall(files, len(items.files)),
        Recall(cmds, len(items.commands)),
    )


# -- sessions -------------------------------------------------------------------------------------

_MODULES = ["parser", "lexer", "tokens", "render", "cache", "store", "auth", "billing", "jobs"]
_DIRS = ["core", "api", "services", "cli", "web", "workers", "models", "utils"]
_WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()


def _log(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    size = 0
    i = 0
    while size < chars:
        i += 1
        level = rng.choice(["INFO", "INFO", "DEBUG", "WARN", "ERROR"])
        line = (
            f"2025-03-0{rng.randint(1, 9)} 12:{i % 60:02d}:{rng.randint(0, 59):02d} {level} "
            f"worker-{rng.randint(1, 8)} job={rng.randint(1000, 9999)} "
            f"{rng.choice(_WORDS)} {rng.choice(_MODULES)}: step {i} took {rng.randint(1, 900)} ms"
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _code(rng: random.Random, lines: int, name: str) -> str:
    out = [f'"""Module {name}."""', "", "from __future__ import annotations", ""]
    for i in range(lines // 4):
        out += [f"def {name}_{i}(x: int) -> int:", f"    return x * {rng.randint(2, 99)}", ""]
    return "\n".join(out)


def _ok_output(rng: random.Random, command: str, lines: int = 6) -> str:
    return "\n".join(
        f"{command.split()[0]}: {rng.choice(_WORDS)} {rng.randint(1, 999)} ok" for _ in range(lines)
    )


def _fail_output(rng: random.Random, module: str) -> str:
    return (
        f"Exit code 1\n============ FAILURES ============\n"
        f"def test_{module}():\n>       assert {module}.run() == {rng.randint(1, 9)}\n"
        f"E       AssertionError: expected {rng.randint(1, 9)}, got {rng.randint(10, 99)}\n"
        f"FAILED tests/test_{module}.py::test_{module} - AssertionError"
    )


class FidelitySession:
    """A session builder with the kinds of items the measure counts (paths under ``root``)."""

    def __init__(self, root: str, seed: int) -> None:
        self.b = SessionBuilder()
        self.root = root.rstrip("/")
        self.rng = random.Random(seed)
        self.files_on_disk: dict[str, str] = {}

    @property
    def entries(self) -> list[dict[str, Any]]:
        return self.b.entries

    def say(self, text: str) -> None:
        self.b.user(text)

    def reply(self, text: str) -> None:
        self.b.reply(text)

    def path(self, directory: str, name: str) -> str:
        return f"{self.root}/src/{directory}/{name}"

    def read(self, path: str, lines: int = 200) -> None:
        body = _code(self.rng, lines, os.path.splitext(os.path.basename(path))[0])
        self.files_on_disk[path] = body
        numbered = "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(body.splitlines(), 1))
        self.b.call("Read", {"file_path": path}, numbered)

    def edit(self, path: str, old: str, new: str) -> None:
        self.b.call(
            "Edit",
            {"file_path": path, "old_string": old, "new_string": new},
            f"The file {path} has been updated.",
        )

    def write(self, path: str, content: str) -> None:
        self.files_on_disk[path] = content
        self.b.call("Write", {"file_path": path, "content": content}, f"File created: {path}")

    def grep(self, pattern: str, path: str) -> None:
        hits = "\n".join(
            f"{path}/{m}.py:{self.rng.randint(1, 400)}: {pattern}" for m in _MODULES[:4]
        )
        self.b.call("Grep", {"pattern": pattern, "path": path, "output_mode": "content"}, hits)

    def glob(self, pattern: str, path: str) -> None:
        found = "\n".join(f"{path}/{m}.ts" for m in _MODULES[:5])
        self.b.call("Glob", {"pattern": pattern, "path": path}, found)

    def bash(self, command: str, *, fail: bool = False, lines: int = 6) -> None:
        module = self.rng.choice(_MODULES)
        output = _fail_output(self.rng, module) if fail else _ok_output(self.rng, command, lines)
        self.b.call("Bash", {"command": command, "description": "run it"}, output, is_error=fail)


def _commands(rng: random.Random, n: int, root: str) -> list[str]:
    """``n`` distinct shell commands of the sorts agents run."""
    makers = [
        lambda i: f"pytest tests/test_{rng.choice(_MODULES)}.py -k case_{i} -q",
        lambda i: (
            f"git log --oneline -{i % 20 + 1} -- src/{rng.choice(_DIRS)}/{rng.choice(_MODULES)}.py"
        ),
        lambda i: f"npm run build -- --filter @app/{rng.choice(_MODULES)}-{i}",
        lambda i: f"grep -rn '{rng.choice(_WORDS)}_{i}' src/{rng.choice(_DIRS)}",
        lambda i: f"sed -n '{i},{i + 40}p' src/{rng.choice(_DIRS)}/{rng.choice(_MODULES)}.py",
        lambda i: f"make -C services/{rng.choice(_MODULES)} test SHARD={i}",
        lambda i: f"ls -la {root}/src/{rng.choice(_DIRS)}/{i}",
        lambda i: f"cd {root} && RUST_LOG=debug cargo test -p {rng.choice(_MODULES)}_{i}",
        lambda i: f"python -m tools.check --strict src/{rng.choice(_DIRS)}/mod_{i}.py",
        lambda i: f'cat <<\'EOF\' > /tmp/case_{i}.json\n{{"case": {i}, "ok": true}}\nEOF',
        lambda i: f"docker compose logs --tail={i + 10} {rng.choice(_MODULES)}-worker",
        lambda i: f"curl -s http://localhost:8080/api/{rng.choice(_MODULES)}/{i} | jq .status",
    ]
    out: list[str] = []
    i = 0
    while len(out) < n:
        i += 1
        command = makers[i % len(makers)](i)
        if command not in out:
            out.append(command)
    return out


def long_pastes(root: str, seed: int = 1) -> FidelitySession:
    s = FidelitySession(root, seed)
    rng = s.rng
    s.say("The staging workers keep dying overnight. Find out why and fix it.")
    s.read(s.path("workers", "pool.py"))
    s.say(
        "Here is the whole log from last night's staging run; the crash is near the end:\n\n"
        + _log(rng, 20_000)
    )
    s.bash("grep -n ERROR /var/log/staging/workers.log | tail -50")
    s.bash("pytest tests/test_pool.py -q", fail=True)
    s.say(
        "And this is the config they run with, pasted from the server:\n\n"
        + "\n".join(f"{w}.{m} = {rng.randint(1, 512)}" for w in _WORDS for m in _MODULES)
    )
    s.edit(s.path("workers", "pool.py"), "max_jobs = 8", "max_jobs = max(1, cpu_count() - 1)")
    s.bash("pytest tests/test_pool.py -q")
    s.say("Also the traceback from yesterday:\n" + _log(rng, 5_000))
    for i in range(8):
        s.say(f"Check the {_MODULES[i]} worker too, and keep the retry logic as it is ({i}).")
        s.read(s.path("workers", f"{_MODULES[i]}.py"), lines=400)
        s.bash(f"pytest tests/workers/test_{_MODULES[i]}.py -q", fail=i % 3 == 0)
    s.reply("The pool now sizes itself from the CPU count; the tests pass.")
    s.say("Good. Write a short note in notes/workers.md about the fix.")
    s.write(f"{root}/notes/workers.md", "# Workers\n\nThe pool sizes itself from the CPU count.\n")
    return s


def harness_messages(root: str, seed: int = 2) -> FidelitySession:
    s = FidelitySession(root, seed)
    rng = s.rng
    config = "\n".join(f"server.{w}.{m}: {rng.randint(1, 9999)}" for w in _WORDS for m in _MODULES)
    s.say("Set up the background indexer and tell me when the first run is done.")
    s.b.call("Task", {"description": "index the repo", "prompt": "index"}, "started")
    s.say(
        "<task-notification>\n<task-id>bg1</task-id>\n<status>completed</status>\n"
        '<summary>Agent "index the repo" completed</summary>\n'
        f"<result>{config}\n{config}</result>\n</task-notification>"
    )
    s.say(
        "<command-name>/model</command-name>\n<command-message>model</command-message>\n"
        "<command-args>opus</command-args>"
    )
    s.say("<local-command-stdout>Set model to opus (claude-opus-4-5)</local-command-stdout>")
    s.say("Now look at why the indexer skips symlinks.")
    s.grep("os.walk", f"{root}/src/indexer")
    s.read(s.path("indexer", "walk.py"))
    s.bash("python -m indexer --dry-run --verbose src/", lines=30)
    s.say("[Request interrupted by user for tool use]")
    s.say("Don't follow symlinks outside the repo, ever. Only inside it.")
    s.say("<bash-input>git status --short</bash-input>")
    s.say("<bash-stdout> M src/indexer/walk.py</bash-stdout><bash-stderr></bash-stderr>")
    s.edit(s.path("indexer", "walk.py"), "followlinks=False", "followlinks=True")
    s.bash("pytest tests/test_walk.py -q", fail=True)
    s.bash("pytest tests/test_walk.py -q")
    for i in range(6):
        s.say(
            f"<task-notification>\n<task-id>bg{i + 2}</task-id>\n<status>completed</status>\n"
            f'<summary>Background command "sleep {i}" completed</summary>\n'
            f"<result>{_log(rng, 3_000)}</result>\n</task-notification>"
        )
        s.say(f"Next, handle case {i}: a symlink loop under fixtures/loop_{i}.")
        s.bash(f"pytest tests/test_walk.py -k loop_{i} -q")
    s.say("<command-name>/compact</command-name>\n<command-message>compact</command-message>")
    return s


def many_commands(root: str, n: int = 300, seed: int = 3) -> FidelitySession:
    s = FidelitySession(root, seed)
    commands = _commands(s.rng, n, root)
    s.say("Run the whole check matrix and fix whatever breaks; report back at the end.")
    per = len(commands) // 10
    for i, command in enumerate(commands):
        if i % per == 0:
            s.say(f"Batch {i // per + 1}: continue with the next part of the matrix.")
        s.bash(command, fail=i % 11 == 5, lines=4)
    s.reply("The matrix ran; 27 commands failed, see above.")
    return s


def search_paths(root: str, seed: int = 4) -> FidelitySession:
    s = FidelitySession(root, seed)
    s.say("Find every place that still imports the old settings module and move them over.")
    for d in _DIRS:
        s.grep("from settings import", f"{root}/src/{d}")
        s.glob("**/*.py", f"{root}/src/{d}/legacy")
    for d in _DIRS[:5]:
        for m in _MODULES[:4]:
            s.read(s.path(d, f"{m}_settings.py"), lines=120)
    s.say("Leave the tests alone for now.")
    for d in _DIRS[:5]:
        s.edit(
            s.path(d, f"{_MODULES[0]}_settings.py"), "from settings import", "from config import"
        )
    s.b.call("LS", {"path": f"{root}/src/config"}, "- __init__.py\n- base.py")
    s.b.call(
        "NotebookEdit",
        {"notebook_path": f"{root}/notebooks/settings_audit.ipynb", "new_source": "print(1)"},
        "ok",
    )
    s.say("Now list what is left.")
    s.bash(f"grep -rln 'from settings import' {root}/src")
    return s


def multiline_requests(root: str, seed: int = 5) -> FidelitySession:
    s = FidelitySession(root, seed)
    for i in range(12):
        m = _MODULES[i % len(_MODULES)]
        s.say(
            f"Change the {m} module ({i}):\n"
            f"  1. accept trailing commas in lists\n"
            f"  2. keep comments attached to the next node\n\n"
            f"For example this must parse:\n\n```python\nitems = [\n    1,\n    2,  # two\n]\n```\n\n"
            f"   Indented note: do not touch {m}_legacy.py."
        )
        s.read(s.path("core", f"{m}.py"))
        s.edit(s.path("core", f"{m}.py"), "def parse(", "def parse_list(")
        s.bash(f"pytest tests/test_{m}.py -q", fail=i % 4 == 1)
    return s


def long_mix(root: str, seed: int = 6) -> FidelitySession:
    """A long session: many requests, files and commands, large outputs."""
    s = FidelitySession(root, seed)
    rng = s.rng
    commands = _commands(rng, 160, root)
    k = 0
    for i in range(60):
        d, m = _DIRS[i % len(_DIRS)], _MODULES[i % len(_MODULES)]
        s.say(
            f"Step {i}: in src/{d}, make {m} {rng.choice(_WORDS)}-safe and add a test; "
            "keep the public API stable."
        )
        s.read(s.path(d, f"{m}_{i}.py"), lines=300)
        if i % 2:
            s.grep(f"{m}_{i}", f"{root}/src/{d}")
        s.edit(s.path(d, f"{m}_{i}.py"), "return x", f"return safe(x, {i})")
        for _ in range(2 + i % 3):
            if k < len(commands):
                s.bash(commands[k], fail=k % 9 == 4, lines=40)
                k += 1
    s.reply("All sixty steps are done and the suite passes.")
    return s


def command_rounds(
    root: str, rounds: int = 8, per_round: int = 50, seed: int = 7
) -> tuple[FidelitySession, list[int]]:
    """A long session compacted again and again: each round a request, ``per_round`` distinct
    shell commands and a read of a new file every second command; with the index of the entry
    each round ends at (a compaction follows each)."""
    s = FidelitySession(root, seed)
    commands = _commands(s.rng, rounds * per_round, root)
    ends: list[int] = []
    for r in range(rounds):
        s.say(f"Round {r}: run the next {per_round} checks of the matrix and fix what fails.")
        for i, command in enumerate(commands[r * per_round : (r + 1) * per_round]):
            s.bash(command, fail=i % 9 == 4, lines=4)
            if i % 2 == 0:
                s.read(s.path(_DIRS[r % len(_DIRS)], f"round_{r}_{i}.py"), lines=20)
        s.reply(f"Round {r} is done; the failures are fixed.")
        ends.append(len(s.entries))
    return s, ends


SESSIONS = {
    "long pastes": long_pastes,
    "harness messages": harness_messages,
    "300 commands": many_commands,
    "grep/glob paths": search_paths,
    "multi-line requests": multiline_requests,
    "long mixed session": long_mix,
}


def write_files(files: dict[str, str]) -> None:
    """Put the files a session read on disk, so that rehydration has them to attach."""
    for path, body in files.items():
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)


def cc_like_summary(entries: Sequence[dict[str, Any]]) -> str:
    """A model's reply written the way Claude Code's summaries cover such sessions: the task
    paraphrased, some of the files, the start of a few user messages, no commands."""
    items = items_of(entries)
    first = " ".join(items.messages[0].split())[:90] if items.messages else "(none)"
    paths: list[str] = []
    for e in entries:
        message = e.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                path = (block.get("input") or {}).get("file_path")
                if isinstance(path, str) and path not in paths:
                    paths.append(path)
    quoted = [f'   - "{" ".join(m.split())[:45]}..."' for m in items.messages[:3]]
    files = [f"   - {p}: read and changed as needed." for p in paths[: len(paths) // 2]]
    return "\n".join(
        [
            "<analysis>Walking through the conversation.</analysis>",
            "<summary>",
            "1. Primary Request and Intent:",
            f"   The user asked: {first}",
            "",
            "2. Key Technical Concepts:",
            "   - Python, pytest, git",
            "",
            "3. Files and Code Sections:",
            *files,
            "",
            "4. Errors and fixes:",
            "   - Some tests failed and were fixed.",
            "",
            "5. Problem Solving:",
            "   Worked through the requests one by one.",
            "",
            "6. All user messages:",
            *quoted,
            "",
            "7. Pending Tasks:",
            "   - None beyond the latest request.",
            "",
            "8. Current Work:",
            "   Finishing the latest request.",
            "",
            "9. Optional Next Step:",
            "   Continue with the latest request.",
            "</summary>",
        ]
    )
