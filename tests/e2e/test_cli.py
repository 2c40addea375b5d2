"""The ``compactd`` command line as a subprocess: ``status`` agrees with ``tokens/status``,
``replay`` reports exactly the compactions the daemon wrote, ``demo`` runs offline."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import msgspec
import pytest
from compactd_client import Client

from compactd.cli.report import MECHANISMS
from compactd.cli.synthetic import make_session, to_jsonl
from tests.conftest import FIXTURES, SpawnDaemon, fixture_transcripts
from tests.helpers import AS_A_SHELL_JOB, run_cli, transcript_lines

VIEWER = FIXTURES / "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
R2_AUTO = FIXTURES / "claude-code-2.1.330__r2_auto.jsonl"
# A window small enough that the fixtures (20K tokens at most) cross the auto-compact
# threshold: 20,000 - 2,000 output = 18,000 effective, auto-compact at 5,000.
# A window the fixture overflows, whose threshold (19,000) stays above its fixed prefix (about
# 15,000 tokens of system prompt and tools: below that no compaction could help).
SMALL_WINDOW = ["--context-window", "34000", "--max-output-tokens", "2000"]


def _int(figure: str) -> int:
    return int(figure.replace(",", ""))


def _boundaries(transcript: Path) -> list[dict[str, Any]]:
    kinds = ("compact_boundary", "microcompact_boundary")
    return [
        e
        for e in transcript_lines(transcript)
        if e.get("type") == "system" and e.get("subtype") in kinds
    ]


async def test_status_matches_tokens_status(spawn_daemon: SpawnDaemon) -> None:
    paths = [VIEWER, R2_AUTO, FIXTURES / "claude-code-2.1.330__r16_manual.jsonl"]
    runs = await asyncio.gather(*(run_cli("status", str(path), "--json") for path in paths))
    async with spawn_daemon() as client:
        for path, (code, out, err) in zip(paths, runs, strict=True):
            assert code == 0, err
            printed = json.loads(out)
            # Without a model, the daemon measures against the one the transcript names.
            opened = await client.open_session(cwd=str(Path.cwd()), transcript_path=str(path))
            status = await client.tokens_status(opened.session_id)
            assert printed["status"] == msgspec.to_builtins(status), path.name
            breakdown = await client.tokens_breakdown(opened.session_id)
            assert printed["breakdown"] == msgspec.to_builtins(breakdown), path.name
    # The table shows the same figures.
    code, out, _ = await run_cli("status", str(VIEWER))
    assert code == 0
    first = json.loads(runs[0][1])["status"]
    assert f"{first['tokens']:,} / {first['autoCompactThreshold']:,} tokens" in out
    assert f"{first['percentLeft']}% left" in out
    # claude-opus-5-5 recorded r2_auto: its 1M window (Claude Code's threshold there: 967,000).
    r2 = json.loads(runs[1][1])["status"]
    assert (r2["contextWindow"], r2["autoCompactThreshold"]) == (1_000_000, 967_000)
    code, out, _ = await run_cli("status", str(R2_AUTO))
    assert "model claude-opus-5-5 (named by the transcript)" in out
    code, out, _ = await run_cli("status", str(R2_AUTO), "--model", "claude-sonnet-4-5")
    assert "model claude-sonnet-4-5\n" in out and "/ 167,000 tokens" in out


async def test_replay_timeline_is_what_the_daemon_wrote(tmp_path: Path) -> None:
    code, out, err = await run_cli(
        "replay", str(VIEWER), *SMALL_WINDOW, "--json", "--data-dir", str(tmp_path / "a")
    )
    assert code == 0, err
    report = json.loads(out)
    events = report["compactions"]
    assert events, "the small window makes the daemon compact"
    written = _boundaries(Path(report["transcriptPath"]))
    assert [e["boundaryUuid"] for e in events] == [b["uuid"] for b in written]
    for event, boundary in zip(events, written, strict=True):
        meta = boundary.get("compactMetadata") or boundary.get("microcompactMetadata") or {}
        assert meta["preTokens"] == event["preTokens"]
        if event["mechanism"] == "full":
            assert meta["postTokens"] == event["postTokens"] < event["preTokens"]
            assert meta["trigger"] == "auto"
    assert report["tokensSaved"] == sum(e["preTokens"] - e["postTokens"] for e in events)
    entries_seen = [e["entry"] for e in events]
    assert entries_seen == sorted(entries_seen) and entries_seen[-1] <= report["entries"]

    # The human-readable run makes the same decisions and prints them as a timeline.
    code, text, err = await run_cli("replay", str(VIEWER), *SMALL_WINDOW)
    assert code == 0, err
    rows = re.findall(r"^(\w+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$", text, re.M)
    assert [(_int(at), mechanism) for mechanism, at, _, _ in rows] == [
        (e["entry"], e["mechanism"]) for e in events
    ]
    assert f"timeline: {len(events)} compaction(s)" in text
    # The offline summarizer wrote the summaries: no model call is claimed.
    fulls = sum(1 for e in events if e["mechanism"] == "full")
    assert fulls and f"summaries built offline: {fulls}, no model call" in text
    assert "model calls:" not in text
    # Exact figures differ a little between runs: the summary names the stored transcript,
    # whose temporary path differs. The printed total is the sum of the printed rows.
    saved = sum(_int(pre) - _int(post) for *_, pre, post in rows)
    assert f"tokens saved in all: {saved:,}" in text
    # Not a terminal: progress comes as plain lines, never carriage returns or escapes.
    assert "\r" not in text and "\x1b" not in text
    assert re.search(r"^replayed [\d,]+ of [\d,]+ entries \(\d+%\) · context \[", text, re.M)


async def test_replay_leaves_out_the_original_compactions(tmp_path: Path) -> None:
    original = _boundaries(R2_AUTO)
    assert original
    code, out, err = await run_cli(
        "replay", str(R2_AUTO), *SMALL_WINDOW, "--json", "--data-dir", str(tmp_path)
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["skippedArtefacts"] >= len(original)
    written = _boundaries(Path(report["transcriptPath"]))
    original_ids = {b["uuid"] for b in original}
    assert not original_ids & {b["uuid"] for b in written}
    assert [b["uuid"] for b in written] == [e["boundaryUuid"] for e in report["compactions"]]


async def test_replay_matches_a_client_driven_replay(spawn_daemon: SpawnDaemon) -> None:
    from compactd.cli.replay import plan_replay, replay_session

    code, out, err = await run_cli("replay", str(VIEWER), *SMALL_WINDOW, "--json")
    assert code == 0, err
    cli = json.loads(out)["compactions"]
    plan = plan_replay(VIEWER.read_bytes().splitlines())
    async with spawn_daemon(options={"summarizer": {"offline": True}}) as client:
        assert isinstance(client, Client)
        outcome = await replay_session(
            client,
            plan,
            model="claude-sonnet-4-5",
            context_window=34_000,
            max_output_tokens=2_000,
            quiet=True,
        )
    assert [(e.entry, e.mechanism) for e in outcome.events] == [
        (e["entry"], e["mechanism"]) for e in cli
    ]
    # Within 2%: the summary names the stored transcript, whose path differs between runs.
    for mine, theirs in zip(outcome.events, cli, strict=True):
        assert abs(mine.pre_tokens - theirs["preTokens"]) <= theirs["preTokens"] // 50


async def test_demo_runs_offline_and_keeps_the_originals() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    code, out, err = await run_cli("demo", env=env)
    assert code == 0, err
    assert "imported 438 entries" in out
    assert "compacting offline" in out and "offline summary" in out
    match = re.search(r"the transcript still holds ([\d,]+) of ([\d,]+) original entries", out)
    assert match and match.group(1) == match.group(2)
    assert re.search(r"timeline: [1-9]\d* compaction\(s\)", out)
    assert "after the replay" in out
    assert "<temporary folder>/sessions/" in out  # not a path that is gone at exit


async def test_bad_input_is_reported_without_a_traceback(tmp_path: Path) -> None:
    code, _, err = await run_cli("status", str(tmp_path / "missing.jsonl"))
    assert code == 1 and "no such file" in err and "Traceback" not in err
    code, _, err = await run_cli("replay", str(tmp_path / "missing.jsonl"))
    assert code == 1 and "no such file" in err
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    code, _, err = await run_cli("replay", str(VIEWER), "--online", env=env)
    assert code == 2 and "ANTHROPIC_API_KEY" in err
    code, _, err = await run_cli("replay", str(VIEWER), "--context-window", "1000")
    assert code == 1 and "window" in err and "Traceback" not in err
    # The daemon's error names the options the person typed, not the wire's params.
    assert "--max-output-tokens" in err and "maxOutputTokens" not in err
    code, _, err = await run_cli("status", str(VIEWER), "--context-window", "-5")
    assert code == 1 and err == "compactd: --context-window must be positive (invalidParams)\n"


async def test_synthetic_replay_never_ends_an_automatic_compaction_above_the_headroom(
    tmp_path: Path,
) -> None:
    code, out, err = await run_cli("replay", "--json", "--data-dir", str(tmp_path))
    assert code == 0, err
    report = json.loads(out)
    threshold = report["status"]["autoCompactThreshold"]
    ends: dict[int, int] = {}
    for event in report["compactions"]:  # one compact/auto call may run micro, then full
        ends[event["entry"]] = event["postTokens"]
    assert ends, "the synthetic session crosses the threshold"
    assert all(post <= threshold * 0.75 for post in ends.values()), (ends, threshold)
    # The replay summarizes offline: no model is called, and the report says so.
    fulls = sum(1 for e in report["compactions"] if e["mechanism"] == "full")
    assert fulls and report["offlineSummaries"] == fulls
    assert report["modelCalls"] == 0 and report["billedInputTokens"] == 0


async def test_wrong_input_is_said_plainly(tmp_path: Path) -> None:
    # A folder with no transcript in it (tests/e2e/test_cli_transcripts.py has the others).
    code, out, err = await run_cli("status", str(tmp_path))
    assert (
        code == 1
        and "holds no transcript (*.jsonl, *.jsonl.zst, *.json)" in err
        and "Traceback" not in err
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = await run_cli("status", str(empty))
    assert code == 1 and "is empty" in err
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"name": "a"}\n')
    code, _, err = await run_cli("status", str(notes))
    assert code == 1 and "transcriptUnreadable" in err and "name" in err
    code, out, err = await run_cli("status", "--model", "gpt-4o", str(VIEWER))
    assert code == 0 and "unknown model 'gpt-4o'" in err and "200,000-token window" in err
    code, out, err = await run_cli(
        "status", "--model", "nonsense", "--context-window", "50000", str(VIEWER)
    )
    assert code == 0 and "assuming a 50,000-token window" in err
    assert "/ 17,000 tokens" in out  # the threshold of that window


async def test_help_everywhere() -> None:
    code, out, _ = await run_cli()
    assert code == 2 and "usage: compactd" in out and "serve" in out and "status" in out
    code, out, _ = await run_cli("serve", "--help")
    assert code == 0 and "LSP base-protocol framing" in out and "protocol/README.md" in out
    for command in ("serve", "status", "compact", "replay", "demo"):
        code, out, _ = await run_cli(command, "--help")
        assert code == 0
        options = out.split("options:", 1)[1].splitlines()
        for i, line in enumerate(options):
            flag = re.match(r"^  (-\S+(?:, --\S+)?(?: [A-Z_]+)?)(\s*)(.*)$", line)
            if flag is None:
                continue
            # argparse puts the help beside the option, or on the next, deeper-indented line.
            described = bool(flag.group(3).strip()) or (
                i + 1 < len(options) and options[i + 1].startswith(" " * 6)
            )
            assert described, f"{command}: {line.strip()} has no help line"
    code, out, _ = await run_cli("replay", "--help")
    assert "output tokens reserved per request" in out


def test_a_report_piped_into_head_ends_quietly() -> None:
    run = subprocess.run(
        f"{sys.executable} -m compactd status {VIEWER} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.stdout == VIEWER.name + "\n"
    assert "Traceback" not in run.stderr and "BrokenPipe" not in run.stderr


async def test_temporary_folders_are_not_printed_as_if_they_stayed() -> None:
    code, out, err = await run_cli("replay", "--json", "--context-window", "100000")
    assert code == 0, err
    assert json.loads(out)["transcriptPath"] is None


# -- in a terminal --------------------------------------------------------------------------------

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _in_terminal(
    *args: str, columns: int = 100, rows: int = 40, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run ``compactd ARGS`` on a pseudo-terminal of ``columns`` x ``rows``, as a person would;
    return its exit code and what the terminal received."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    process = subprocess.Popen(
        [sys.executable, "-m", "compactd", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env={**base, "TERM": "xterm-256color", **(env or {})},
    )
    os.close(slave)
    received = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        received += chunk
    os.close(master)
    assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    return process.returncode, received.decode().replace("\r\n", "\n")


@pytest.mark.parametrize("path", fixture_transcripts(), ids=lambda p: p.name[:40])
def test_status_of_every_fixture_fits_a_100_by_40_terminal(path: Path) -> None:
    _, screen = _in_terminal("status", str(path))
    assert _ESCAPE.search(screen), "on a terminal the report is in colour"
    lines = _ESCAPE.sub("", screen).rstrip("\n").split("\n")
    assert len(lines) <= 40, (path.name, len(lines))
    widest = max(lines, key=len)
    assert len(widest) <= 100, (path.name, widest)


def test_no_color_plain_and_pipes_get_plain_text() -> None:
    for args, env in (
        (["status", str(R2_AUTO)], {"NO_COLOR": "1"}),
        (["status", str(R2_AUTO), "--plain"], {}),
        (["replay", str(VIEWER), *SMALL_WINDOW], {"NO_COLOR": "1"}),
    ):
        _, screen = _in_terminal(*args, env=env)
        assert "\x1b" not in screen, (args, env)
        assert not set(screen) & set("━─│╭"), "no box drawing in plain text"
        assert "\r" not in screen.replace("\r\n", "\n"), "no line rewritten in place"
    # Piped, the same report is plain without being asked.
    piped = subprocess.run(
        [sys.executable, "-m", "compactd", "status", str(R2_AUTO)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TERM": "xterm-256color"},
    )
    assert "\x1b" not in piped.stdout and "[" in piped.stdout  # the gauge in ASCII


def _accounting_rows(text: str) -> tuple[list[tuple[str, int]], int]:
    """The rows and the total of the plain status table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("the next request carries"))
    rows: list[tuple[str, int]] = []
    for line in lines[start + 1 :]:
        match = re.match(r"^(.+?)\s+(-?[\d,]+)\s+(-?[\d.]+%|-)$", line)
        assert match, line
        if match.group(1) == "total":
            return rows, _int(match.group(2))
        rows.append((match.group(1), _int(match.group(2))))
    raise AssertionError("no total row")


# One case per test: each runs two CLI processes, so that a busy machine keeps every test well
# inside its timeout.
@pytest.mark.parametrize(
    ("path", "extra"),
    [
        (VIEWER, []),
        (R2_AUTO, []),
        (FIXTURES / "NotTahaAli__sessclone__compaction.jsonl", []),
        (VIEWER, SMALL_WINDOW),  # above the threshold: auto would compact
        (VIEWER, ["--context-window", "20000", "--max-output-tokens", "2000"]),  # cannot
    ],
    ids=["viewer", "r2-auto", "sessclone", "viewer-small", "viewer-too-small"],
)
async def test_status_table_adds_up_and_says_what_auto_would_do(
    path: Path, extra: list[str]
) -> None:
    (code, text, err), (_, raw, _) = await asyncio.gather(
        run_cli("status", str(path), *extra), run_cli("status", str(path), *extra, "--json")
    )
    assert code == 0, err
    report = json.loads(raw)
    rows, total = _accounting_rows(text)
    assert sum(tokens for _, tokens in rows) == total == report["status"]["tokens"]
    prefix = report["status"].get("fixedPrefixTokens", 0)  # omitted when 0
    assert rows[0] == ("system prompt and tools", prefix) or (
        prefix == 0 and rows[0][0].startswith("system prompt and tools (no usage yet)")
    )
    assert f"{total:,} / " in text  # the gauge shows the same total
    auto = report["preview"]["auto"]
    if auto["wouldCompact"]:
        expected = (
            f"next: compact/auto would run {MECHANISMS[auto['mechanism']]}, "
            f"{auto['preTokens']:,} -> about {auto['estimatedPostTokens']:,} tokens"
        )
    elif auto["reasonCode"] == "belowThreshold":
        to_go = report["status"]["autoCompactThreshold"] - total
        expected = f"next: nothing to do, {to_go:,} tokens below the auto-compact threshold"
    else:
        assert auto["reasonCode"] == "fixedPrefixTooLarge"
        expected = f"next: compact/auto would not compact: {auto['reason']}"
    assert expected in text, (path.name, extra)


async def test_every_report_has_json(tmp_path: Path) -> None:
    code, out, err = await run_cli("demo", "--json")
    assert code == 0, err
    demo = json.loads(out)
    assert demo["import"]["entries"] == 438 and demo["import"]["transcriptPath"] is None
    compaction = demo["compaction"]
    assert compaction["postCompactTokens"] == compaction["status"]["tokens"]
    assert demo["auto"]["originalEntriesKept"] == demo["auto"]["originalEntries"]
    assert "<temporary folder>" in compaction["summary"]
    code, out, _ = await run_cli("status", str(VIEWER), "--json")
    report = json.loads(out)
    assert set(report) == {
        "transcript",
        "model",
        "entries",
        "skippedLines",
        "status",
        "breakdown",
        "stats",
        "preview",
    }
    assert (report["model"], report["entries"]) == ("claude-sonnet-4-20250514", 438)
    code, out, _ = await run_cli("replay", str(VIEWER), "--json", *SMALL_WINDOW)
    assert json.loads(out)["compactions"]


def test_ctrl_c_ends_quietly_with_130(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # A long replay (6,000 entries), so that however slow the machine, most of it is still
    # ahead when the signal arrives: the test waits for what the replay prints, never on time.
    long = tmp_path / "long.jsonl"
    long.write_bytes(to_jsonl(make_session(entries=6_000, target_tokens=400_000)))
    process = subprocess.Popen(
        [sys.executable, "-c", AS_A_SHELL_JOB, "replay", str(long), "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a shell's foreground job
    )
    assert process.stdout is not None
    # Wait for the replay to be under way (its first tenth done), then press Ctrl-C: the
    # terminal signals the group.
    assert process.stdout.readline().startswith(b"compactd ")
    assert process.stdout.readline().startswith(b"replaying ")
    while not (line := process.stdout.readline()).startswith(b"replayed "):
        assert line, "the replay ended before its first progress line"
    assert b"(100%)" not in line
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert err.decode() == "compactd: interrupted\n"
    # The daemon it spawned is gone too.
    alive = subprocess.run(["pgrep", "-f", str(data)], capture_output=True, text=True)
    assert alive.stdout == "", alive.stdout
