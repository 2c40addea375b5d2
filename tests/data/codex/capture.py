"""Capture the Codex rollouts kept in tests/data/codex/ from the pinned Codex CLI.

    .venv/bin/python tests/data/codex/capture.py [--codex PATH] [--out DIR]

Runs the real ``codex exec`` (tests/editors/codex_cli.py: offline, against tests/emulator's
Responses API) in a temporary folder and copies each session's rollout into ``--out``
(default: this folder), with the rollout's own name replaced by a descriptive one. Both sessions
compact mid-turn (a low ``model_auto_compact_token_limit``) with commands and a file patch in
the span the compaction drops, then go on with ``codex exec resume``, which compacts again.
A trusted SessionStart hook adds a line of context at start-up, on resume and after each
compaction. tests/data/README.md says what each file holds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.editors.codex_cli import (  # noqa: E402
    DEFAULT_CODEX,
    FALLBACK_MODEL,
    KNOWN_MODEL,
    VERSION,
    Codex,
    Hooks,
    Steps,
    rollout_lines,
    trust_entries,
)
from tests.emulator import Emulator, Reply  # noqa: E402
from tests.emulator.responses import (  # noqa: E402
    add_file_patch,
    apply_patch,
    exec_command,
    update_file_patch,
)

# Codex 0.171.0's own prompt and tools are about 9,200 tokens (10,000 with the fallback
# model's); a command printing about 4,700 takes the history past the limit.
LIMITS = {KNOWN_MODEL: 12_000, FALLBACK_MODEL: 12_500}
SUMMARY = (
    "Progress: counted the crates with seq, wrote notes.txt with a patch and printed it.\n"
    "Next: wait for the user's next request."
)


def _patch(model: str, patch: str) -> list[object]:
    """A patch as the model sends it: the freeform apply_patch tool when Codex offers it, else
    ``apply_patch`` in a shell command (Codex intercepts it)."""
    if model == KNOWN_MODEL:
        return [apply_patch(patch)]
    return [exec_command(f"apply_patch <<'PATCH'\n{patch}PATCH\n")]


def _turn(model: str, first: bool) -> list[Reply]:
    patch = (
        add_file_patch("notes.txt", "crates: 4000")
        if first
        else update_file_patch("notes.txt", "crates: 4000", "crates: 4000 (checked twice)")
    )
    return [
        Reply(text="Counting the crates.", tool_uses=[exec_command("seq 1 4000")]),
        Reply(text="Writing the notes.", tool_uses=_patch(model, patch)),
        Reply(text="Showing them.", tool_uses=[exec_command("cat notes.txt")]),
        Reply(text="Done: notes.txt holds the count."),
    ]


def capture(exe: str, model: str, work: Path, out: Path, name: str) -> Path:
    project = work / "project"
    project.mkdir(parents=True)
    with Emulator() as emu:
        steps = Steps(_turn(model, True), summary=SUMMARY)
        emu.set_default(steps)
        codex = Codex(exe, emu, work / "home", project, work / "codex.log", model=model,
                      auto_compact_limit=LIMITS[model])  # fmt: skip
        hooks = Hooks(work / "hooks", {"SessionStart": {"hookSpecificOutput": {
            "hookEventName": "SessionStart", "additionalContext": "hook context ($SOURCE)"}}})  # fmt: skip
        config = {"hooks": {"SessionStart": [{"matcher": "", "hooks": [
            {"type": "command", "command": hooks.command("SessionStart"), "timeout": 60}]}]}}  # fmt: skip
        source = codex.codex_home / "hooks.json"
        source.write_text(json.dumps(config, indent=2))
        codex.extra_config += trust_entries(source, config)
        codex.write_config()
        first = codex.exec("Count the crates, write the count into notes.txt and show it")
        steps.add(*_turn(model, False))
        second = codex.resume(first.thread_id, "Check the count again and note that you did")
    kinds = first.kinds() + second.kinds()
    if kinds.count("compaction") != 2:
        raise SystemExit(f"{name}: expected two compactions, Codex sent {kinds}")
    rollout = codex.rollout(first.thread_id)
    target = out / name
    shutil.copyfile(rollout, target)
    types = sorted({line["type"] for line in rollout_lines(target)})
    print(f"{target}: {len(rollout_lines(target))} lines, {types}; requests {kinds}")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codex", default=os.environ.get("CODEX") or str(DEFAULT_CODEX))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    if not shutil.which(args.codex):
        raise SystemExit(f"no Codex CLI at {args.codex}: tests/editors/setup.sh installs it")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="codex-capture-") as tmp:
        capture(args.codex, KNOWN_MODEL, Path(tmp) / "a", args.out,
                f"codex-{VERSION}__{KNOWN_MODEL}__mid_turn_and_resume.jsonl")  # fmt: skip
        capture(args.codex, FALLBACK_MODEL, Path(tmp) / "b", args.out,
                f"codex-{VERSION}__fallback_model__mid_turn_and_resume.jsonl")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
