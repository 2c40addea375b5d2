"""The commands and patches of a Codex rollout as compactd's tool uses: a command as the person
would type it, the files an ``apply_patch`` patch changes, the files a reading command shows
(docs/codex.md#models)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "APPLY_PATCH",
    "LOCAL_SHELL",
    "SHELL_READ",
    "PatchedFile",
    "absolute",
    "command_of",
    "heredoc_patch",
    "patch_files",
    "patch_uses",
    "read_files",
    "run_uses",
]

# The name compactd gives a local_shell_call, a file read by a command, and a patch.
LOCAL_SHELL: Final = "local_shell"
SHELL_READ: Final = "shell_read"
APPLY_PATCH: Final = "apply_patch"
_PATCH_FILE: Final = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.MULTILINE)
_PATCH_MOVE: Final = re.compile(r"^\*\*\* Move to: (.+?)\s*$", re.MULTILINE)
_HEREDOC: Final = re.compile(
    r"^\s*(?:cd\s+\S+\s*&&\s*)?apply_patch\s*<<-?\s*['\"]?(\w+)['\"]?\s*\n(.*)\n\s*\1\s*$",
    re.DOTALL,
)
# Commands that show a file and change nothing: each plain argument is a file read.
_READERS: Final = frozenset({"cat", "head", "tail", "nl", "less", "more", "bat", "wc"})
_SHELL_OPERATORS: Final = frozenset({"|", "||", "&&", ";", ">", ">>", "<", "&", "2>", "2>&1"})


def command_of(value: Any) -> str | None:
    """A command as the string the person would type: an argv ``["bash", "-lc", "..."]`` is
    its script, another argv is joined with shell quoting."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        argv: list[str] = list(value)
        if len(argv) >= 3 and argv[-2] in ("-lc", "-c") and argv[0].rsplit("/", 1)[-1] in (
            "bash", "sh", "zsh", "dash",
        ):  # fmt: skip
            return argv[-1]
        return shlex.join(argv)
    return None


@dataclass(frozen=True, slots=True)
class PatchedFile:
    path: str
    action: str  # Add, Update, Delete
    added: str  # the lines the patch adds to it
    section: str  # the patch's text for this file
    moved_to: str | None = None


def patch_files(patch: str) -> list[PatchedFile]:
    """The files an ``apply_patch`` patch changes, in order, each with what it adds."""
    marks = list(_PATCH_FILE.finditer(patch))
    out: list[PatchedFile] = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(patch)
        section = patch[mark.start() : end]
        end_mark = section.find("\n*** End Patch")
        if end_mark >= 0:
            section = section[:end_mark]
        added = "\n".join(line[1:] for line in section.splitlines()[1:] if line.startswith("+"))
        moved = _PATCH_MOVE.search(section)
        out.append(
            PatchedFile(
                mark.group(2), mark.group(1), added, section, moved.group(1) if moved else None
            )
        )
    return out


def heredoc_patch(command: str) -> str | None:
    """The patch of an ``apply_patch <<'EOF' ... EOF`` command (Codex applies it as a file
    change, not as a command: docs/codex.md#models), else None."""
    match = _HEREDOC.match(command)
    if match is None or "*** Begin Patch" not in match.group(2):
        return None
    return match.group(2) + "\n"


def read_files(command: str) -> list[str]:
    """The files a command that only reads shows the model (``cat a b``, ``sed -n 1,9p f``,
    ``nl -ba f``, ``head -n 5 f``): none for anything else (a pipe, a redirect, a write)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    if not words or any(w in _SHELL_OPERATORS for w in words):
        return []
    program, args = words[0].rsplit("/", 1)[-1], words[1:]
    if program == "sed":
        if "-i" in args or not args or args[0] != "-n":
            return []
        args = args[2:]  # the script
    elif program not in _READERS:
        return []
    files: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-n", "-c", "--lines", "--bytes"):
            skip = True
            continue
        if arg.startswith("-"):
            continue
        files.append(arg)
    return files


def absolute(path: str, folder: str | None) -> str:
    """``path`` against the folder a call ran in (Codex's paths are relative to it)."""
    if not folder or path.startswith("/"):
        return path
    return f"{folder.rstrip('/')}/{path.removeprefix('./')}"


def patch_uses(call_id: str, patch: str, cwd: str | None = None) -> list[dict[str, Any]]:
    """A patch's tool uses: one per file it changes (the first carries the whole patch and
    the call's id; the others are named after it and have no result of their own)."""
    files = patch_files(patch)
    if not files:
        return [{"type": "tool_use", "id": call_id, "name": APPLY_PATCH, "input": {"patch": patch}}]
    uses: list[dict[str, Any]] = []
    for n, f in enumerate(files):
        args: dict[str, Any] = {"file_path": absolute(f.path, cwd), "action": f.action.lower()}
        if f.added:
            args["new_string"] = f.added
        if f.moved_to:
            args["move_to"] = absolute(f.moved_to, cwd)
        if n == 0:
            args["patch"] = patch
        ident = call_id if n == 0 else f"{call_id}.file{n}"
        uses.append({"type": "tool_use", "id": ident, "name": APPLY_PATCH, "input": args})
    return uses


def run_uses(
    call_id: str, name: str, args: dict[str, Any], cwd: str | None = None
) -> list[dict[str, Any]]:
    """A command's tool uses: the command (a ``command`` string), or the patch an
    ``apply_patch`` heredoc applies; and a ``shell_read`` of each file a reading command shows."""
    workdir = args.get("workdir") if isinstance(args.get("workdir"), str) else None
    folder = workdir or cwd
    if name == APPLY_PATCH:
        patch = args.get("input") or args.get("patch") or ""
        return patch_uses(call_id, patch if isinstance(patch, str) else "", folder)
    command = command_of(args.get("command", args.get("cmd"))) or ""
    patch = heredoc_patch(command)
    if patch is not None:
        return patch_uses(call_id, patch, folder)
    # apply_patch given as an argv: ["apply_patch", "<patch>"]
    argv = args.get("command")
    if isinstance(argv, list) and len(argv) == 2 and argv[0] == APPLY_PATCH:
        return patch_uses(call_id, str(argv[1]), folder)
    kept = {
        k: v
        for k, v in args.items()
        if k in ("workdir", "timeout_ms", "yield_time_ms", "max_output_tokens", "justification")
    }
    uses: list[dict[str, Any]] = [
        {"type": "tool_use", "id": call_id, "name": name, "input": {"command": command, **kept}}
    ]
    for n, path in enumerate(read_files(command)):
        uses.append(
            {"type": "tool_use", "id": f"{call_id}.read{n}", "name": SHELL_READ,
             "input": {"file_path": absolute(path, folder)}}
        )  # fmt: skip
    return uses
