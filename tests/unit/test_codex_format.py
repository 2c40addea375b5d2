"""The Codex rollout reader (compactd/agents/codex/format.py, docs/codex.md#how-compactd-reads-a-rollout):
every variant a Codex CLI writes, read into compactd's records, the same whichever way the file
is cut into chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactd import port
from compactd.agents.codex.calls import heredoc_patch, patch_files, read_files
from compactd.agents.codex.format import CODEX
from compactd.core.handback import hand_back, last_compaction
from compactd.core.ledger import build_ledger
from compactd.transcript.model import ParseReport, Record, ToolResultBlock, ToolUseBlock
from tests.codex_rollouts import CAPTURED, compressed, long_rollout, older_rollout


def _project(path: Path) -> str:
    """The working folder the captured rollout's session ran in (tests/data/codex/capture.py)."""
    return f"/tmp/codex-capture-03bl9w6d/{'a' if 'gpt' in path.name else 'b'}/project"


def _uses(records: list[Record], name: str) -> list[ToolUseBlock]:
    return [
        b for r in records for b in r.entry.blocks if isinstance(b, ToolUseBlock) and b.name == name
    ]


@pytest.mark.parametrize(
    "command,files",
    [
        ("cat notes.txt", ["notes.txt"]),
        ("cat a.py b.py", ["a.py", "b.py"]),
        ("sed -n 1,40p src/app.py", ["src/app.py"]),
        ("nl -ba src/app.py", ["src/app.py"]),
        ("head -n 20 README.md", ["README.md"]),
        ("sed -i s/a/b/ x.py", []),
        ("cat a.py | grep x", []),
        ("cat > out.txt", []),
        ("pytest -q", []),
        ("echo 'unterminated", []),
    ],
)
def test_a_command_that_only_reads_names_its_files(command: str, files: list[str]) -> None:
    assert read_files(command) == files


def test_patches_name_each_file_and_what_they_add() -> None:
    patch = (
        "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Update File: b.py\n@@\n-x\n+y\n"
        "*** Move to: c.py\n*** Delete File: d.md\n*** End Patch\n"
    )
    found = patch_files(patch)
    assert [(f.path, f.action) for f in found] == [("a.txt", "Add"), ("b.py", "Update"),
                                                   ("d.md", "Delete")]  # fmt: skip
    assert found[0].added == "one\ntwo" and found[1].moved_to == "c.py"
    heredoc = f"apply_patch <<'PATCH'\n{patch}PATCH\n"
    assert heredoc_patch(heredoc) == patch
    assert heredoc_patch("cd /w && apply_patch <<EOF\n" + patch + "EOF") == patch
    assert heredoc_patch("cat <<'PATCH'\nhello\nPATCH\n") is None


def test_the_captured_rollouts_read_as_compactd_s_records() -> None:
    for path in CAPTURED:
        data = path.read_bytes()
        assert port.detect(data) is CODEX
        report = ParseReport()
        records = port.records(data, report)
        assert report.skipped == 0
        kinds = [r.entry.type for r in records]
        assert kinds.count("system") == 2  # two compactions, each a boundary...
        assert sum(1 for r in records if r.entry.is_compact_summary) == 2  # ...and a summary
        # Every command is a ``command`` string; the patch is a file change, not a command.
        commands = [u.input["command"] for u in _uses(records, "exec_command")]
        assert commands.count("seq 1 4000") == 2 and commands.count("cat notes.txt") == 2
        assert not any("apply_patch" in c for c in commands)
        assert {u.input["file_path"] for u in _uses(records, "apply_patch")} == {
            f"{_project(path)}/notes.txt"
        }
        assert len(_uses(records, "shell_read")) == 2
        # Every assistant record names the turn's model.
        models = {r.entry.message.model for r in records if r.entry.type == "assistant"}
        assert models == {"gpt-5.5" if "gpt" in path.name else "emu-codex"}
        # Reading it again gives the same records (a follower, the recall index).
        assert [r.raw for r in port.records(data)] == [r.raw for r in records]


def test_usage_comes_once_per_response() -> None:
    """0.171.0 writes a response's usage twice (token_usage_record, then token_count): the count
    anchors on the record, before the tool's output, so that the output is counted."""
    data = CAPTURED[0].read_bytes()
    records = port.records(data)
    usage = [r for r in records if r.entry.type == "assistant" and r.entry.message.usage]
    lines = [json.loads(line) for line in data.splitlines()]
    assert len(usage) == sum(1 for line in lines if line["type"] == "token_usage_record")
    first = next(i for i, r in enumerate(records) if r.entry.message and r.entry.message.usage)
    assert isinstance(records[first + 1].entry.blocks[0], ToolResultBlock)


def test_an_older_variant_reads_every_item() -> None:
    rollout = older_rollout()
    report = ParseReport()
    records = port.records(rollout.data(corrupt=True, torn=True), report)
    # The damaged line and the unknown type are skipped and counted; the torn line is not read
    # by ``complete`` (the caller's cut) but here, fed whole, it is damaged too.
    assert report.skipped == 3 and "unknown type 'future_kind'" in (report.first_error or "")
    complete = port.complete(rollout.data(torn=True))
    assert complete.endswith(b"\n") and b'"pay' not in complete[-10:]
    assert [u.input["command"] for u in _uses(records, "local_shell")] == [
        "pytest -q tests/test_importer.py"
    ]
    failed = [
        b for r in records for b in r.entry.blocks if isinstance(b, ToolResultBlock) and b.is_error
    ]
    assert len(failed) == 1  # the pytest run with exit code 1
    summaries = [r for r in records if r.entry.is_compact_summary]
    remote, old = ("\n".join(b.text for b in s.entry.blocks) for s in summaries)
    assert "encrypted" in remote and "Find why the pelican importer" in remote
    # The old compaction line kept no history: Codex's rebuilt one is the user's messages.
    assert "Keep the old CSV dialect" in old and "Find why the pelican" in old


def test_a_stream_keeps_what_later_chunks_need() -> None:
    """Cut anywhere, the chunks read as the whole file does: the model of the turn, the
    usage rule and the messages an old compaction line leaves out are kept across chunks."""
    data = older_rollout().data() + CAPTURED[1].read_bytes()
    whole = [r.raw for r in port.records(data)]
    lines = data.splitlines(keepends=True)
    for cut in (3, 11, 17, 29, 40, 71):
        reading = port.Reading()
        got = reading.records(b"".join(lines[:cut])) + reading.records(b"".join(lines[cut:]))
        assert [r.raw for r in got] == whole, cut


def test_a_compressed_rollout_reads_as_the_plain_one() -> None:
    data = CAPTURED[0].read_bytes()
    half = len(data) // 2
    cut = data.index(b"\n", half) + 1
    two_frames = compressed(data[:cut]) + compressed(data[cut:])
    for packed in (compressed(data), two_frames):
        assert port.detect(packed) is CODEX and port.complete(packed) == packed
        assert port.transcript(packed) == port.transcript(data)


def test_claims_only_codex_lines() -> None:
    assert CODEX.claims(CAPTURED[0].read_bytes()[:65536])
    assert not CODEX.claims(
        b'{"type":"user","uuid":"u1","message":{"role":"user","content":"x"}}\n'
    )
    assert not CODEX.claims(b'{"said": "hi"}\n')
    assert not CODEX.claims(b"")


def test_codex_kept_messages_are_not_handed_back_and_dropped_ones_are() -> None:
    rollout = long_rollout(7, turns=24)
    records = port.records(rollout.data())
    at = [i for i, r in enumerate(records) if r.entry.is_compact_summary]
    assert len(at) == 2
    # The first (remote) compaction kept every message: only commands and files go back.
    first = hand_back(last_compaction(records[: at[0] + 1]), limit=10**9)
    assert first.counts[0] == 0 and first.counts[1] > 10 and first.counts[2] > 3
    # The second kept the latest three: the span's nine others go back, word for word.
    second = hand_back(last_compaction(records[: at[1] + 1]), limit=10**9)
    dropped = [m.text for m in second.missing.messages if not m.carried]
    assert dropped == rollout.spans[1]["messages"][:9]
    assert all(m in second.text for m in dropped)


def test_the_ledger_counts_commands_files_and_reads() -> None:
    records = port.records(CAPTURED[1].read_bytes())
    ledger = build_ledger(records, cwd=_project(CAPTURED[1]))
    assert {c.command for c in ledger.commands} == {"seq 1 4000", "cat notes.txt"}
    (notes,) = ledger.files
    assert notes.shown == "notes.txt" and notes.edits == 2 and notes.reads == 2
    assert [m.text for m in ledger.human][:1] == [
        "Count the crates, write the count into notes.txt and show it"
    ]
