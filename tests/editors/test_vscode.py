"""The extension in a real VS Code: code-server (VS Code 1.100 in the browser) driven by Playwright
in Debian's chromium, the way a new user meets it.

The vsix that `npm run package` builds is installed into a fresh code-server; the window opens a
project folder with default compactd settings except the summarizer's address (the loopback API
emulator) and a venv on PATH, and a home with a Claude Code transcript of that folder. Each test is
one step of the user's way, in order: the daemon starts on its own and the gauge shows the
workspace's Claude Code session; the picker lists it as followed; the breakdown opens from its
command; "Compact conversation" on the followed session offers "Compact and resume in Claude Code"
instead (compactd's copy of a followed session takes no writes); the person imports an earlier
transcript through the picker, and on that session a slow compaction is cancelled and leaves the
gauge as it was and a compaction runs with its progress and frees the window; back on the followed
session, the gauge moves as Claude Code appends to the transcript, a compaction by Claude Code
included; the context panel opens from the gauge with the parts of the next request and the
history (screenshots in clients/vscode/media/, light and dark); "Compact and resume in Claude
Code" opens a terminal running the resume command. A step fails when the text a user should see
does not appear. The lines the test appends report the usage the real session would (the count
`compactd status` gives of the file with them), so the figures on the screenshots agree with each
other. Screenshots go to tests/editors/out/vscode/.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect, sync_playwright

from tests.editors.conftest import ROOT, fixture, out_dir, require, venv_bin
from tests.emulator import Emulator, Reply

CODE_SERVER_VERSION = "4.100.3"
FIXTURE = "d-kimuson__claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
SESSION = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
# An earlier session of the same project, which the person imports as compactd's own copy (not
# followed) to compact it in place.
EARLIER_FIXTURE = "d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
EARLIER = "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
# A real Claude Code 2.1.330 session with a /compact: its boundary and summary lines are what
# Claude Code appends when it compacts.
CLAUDE_COMPACT_FIXTURE = "claude-code-2.1.330__r16_manual.jsonl"
MEDIA = ROOT / "clients" / "vscode" / "media"
# Set (by `make vscode-screenshots`) to retake the README's pictures: the shots that illustrate
# it are copied into MEDIA. Otherwise a run writes only under tests/editors/out/ and leaves the
# checkout as it was.
RETAKE_MEDIA = os.environ.get("COMPACTD_VSCODE_MEDIA") == "1"
VSIX = ROOT / "clients" / "vscode" / "compactd-vscode.vsix"
# Flags that let chromium run headless as root in a container, with nothing phoning home.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long a step may wait for what the user should see (the first start includes the daemon's).
STEP_TIMEOUT_MS = 30_000

pytestmark = pytest.mark.timeout(300)


def code_server_path() -> str:
    default = (
        Path.home()
        / ".cache"
        / "compactd-editors"
        / f"code-server-{CODE_SERVER_VERSION}"
        / "node_modules"
        / ".bin"
        / "code-server"
    )
    return require(
        os.environ.get("CODE_SERVER", str(default)),
        f"code-server {CODE_SERVER_VERSION} is installed by `make test-editors` (npm, Node 20); "
        "or point CODE_SERVER at a code-server executable",
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"code-server exited ({process.returncode}): {log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"code-server did not answer on {url}: {log.read_text()}")


def _publish(shot: Path, picture: Path) -> None:
    """Copy ``shot`` over the README's ``picture`` when retaking them (``RETAKE_MEDIA``)."""
    if RETAKE_MEDIA:
        shutil.copy(shot, picture)


@dataclass
class Editor:
    """One code-server window in chromium, and what the steps need around it."""

    page: Page
    emulator: Emulator
    out: Path
    workspace: Path
    transcript: Path
    earlier: Path

    def shot(self, name: str, clip: dict[str, float] | None = None) -> Path:
        path = self.out / f"{name}.png"
        self.page.screenshot(path=str(path), clip=clip)  # type: ignore[arg-type]
        return path

    def gauge(self) -> Locator:
        """The extension's status bar item (its id ends with the item's own id)."""
        return self.page.locator('[id$="compactd.context"]')

    def run_command(self, title: str) -> None:
        """Run a command from the command palette by its title."""
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("F1")
        box = self.page.locator(".quick-input-widget input")
        expect(box).to_be_visible()
        box.fill(f">{title}")
        row = self.page.locator(".quick-input-list .monaco-list-row", has_text=title).first
        expect(row).to_be_visible()
        row.click()

    def pick(self, text: str) -> None:
        row = self.page.locator(".quick-input-list .monaco-list-row", has_text=text).first
        expect(row).to_be_visible()
        row.click()

    def toast(self, text: str | re.Pattern[str]) -> Locator:
        return self.page.locator(".notifications-toasts .notification-toast", has_text=text)

    def gauge_text(self) -> str:
        return self.gauge().inner_text().strip()

    def start_compaction(self, model_delay_s: float) -> Locator:
        """Run *Compact conversation* with the model answering after ``model_delay_s``; returns
        its progress notification once it shows the summarizing phase."""
        self.emulator.reset()
        self.emulator.script(Reply(delay=model_delay_s))
        self.run_command("compactd: Compact conversation")
        progress = self.toast("compactd: compacting")
        expect(progress).to_contain_text("Summarizing the conversation")
        return progress


@pytest.fixture(scope="module")
def editor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Editor]:
    code_server = code_server_path()
    chromium = require("chromium", "install Debian's chromium: apt-get install chromium")
    if not VSIX.exists():
        pytest.fail(f"{VSIX} is missing: build it with `make -C clients/vscode package`")
    transcript = fixture(FIXTURE)
    out = out_dir("vscode")
    root = tmp_path_factory.mktemp("code-server")
    home, workspace = root / "home", root / "project"
    user_data, extensions = root / "user-data", root / "extensions"
    for d in (home, workspace, user_data / "User", extensions):
        d.mkdir(parents=True)
    (workspace / "README.md").write_text("A project worked on with Claude Code.\n")
    # The venv with compactd's console script is on PATH, as after `make demo` and adding the venv
    # to one's profile. (VS Code's server takes the extension host's environment from a login
    # shell, so the profile is where PATH must say it.)
    path = f"{venv_bin()}:/usr/local/bin:/usr/bin:/bin"
    (home / ".profile").write_text(f'export PATH="{venv_bin()}:$PATH"\n')
    # The Claude Code transcript of a session started in the project folder.
    slug = re.sub(r"[^A-Za-z0-9]", "-", str(workspace))
    transcripts = home / ".claude" / "projects" / slug
    transcripts.mkdir(parents=True)
    shutil.copy(transcript, transcripts / f"{SESSION}.jsonl")
    # An earlier session's transcript, kept outside Claude Code's folders (say, from a colleague).
    earlier = home / "Downloads" / f"{EARLIER}.jsonl"
    earlier.parent.mkdir()
    shutil.copy(fixture(EARLIER_FIXTURE), earlier)

    emulator = Emulator()
    emulator.start()
    settings = {
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "workbench.colorTheme": "Default Light Modern",
        "extensions.autoCheckUpdates": False,
        "extensions.autoUpdate": False,
        "telemetry.telemetryLevel": "off",
        # The DOM renderer: the terminal's text is in the page, where a step can read it.
        "terminal.integrated.gpuAcceleration": "off",
        "update.mode": "none",
        # The only compactd settings: where the summarizer's API is, and a visible keep-alive.
        "compactd.summarizer": {"baseUrl": emulator.base_url, "maxRetries": 0},
        "compactd.keepAliveIntervalMs": 1000,
    }
    (user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=2))
    config = root / "config.yaml"
    config.write_text("auth: none\ncert: false\n")
    env = {
        "PATH": path,
        "SHELL": "/bin/sh",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "ANTHROPIC_API_KEY": "test-key",
        "LANG": "C.UTF-8",
        # The daemon runs this checkout's code, whichever checkout the venv was installed from.
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'clients' / 'python'}",
    }
    common = [
        "--config",
        str(config),
        "--user-data-dir",
        str(user_data),
        "--extensions-dir",
        str(extensions),
    ]
    installed = subprocess.run(
        [code_server, *common, "--install-extension", str(VSIX)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    port = free_port()
    log = out / "code-server.log"
    with log.open("wb") as log_fh:
        server = subprocess.Popen(
            [
                code_server,
                *common,
                "--bind-addr",
                f"127.0.0.1:{port}",
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--disable-getting-started-override",
                str(workspace),
            ],
            env=env,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", server, log)
        with sync_playwright() as pw:
            browser: BrowserContext = pw.chromium.launch_persistent_context(
                str(root / "chromium-profile"),
                executable_path=chromium,
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1280, "height": 800},
            )
            try:
                page = browser.pages[0] if browser.pages else browser.new_page()
                page.set_default_timeout(STEP_TIMEOUT_MS)
                expect.set_options(timeout=STEP_TIMEOUT_MS)
                page.goto(f"http://127.0.0.1:{port}/?folder={workspace}")
                page.locator(".monaco-workbench").wait_for()
                yield Editor(
                    page=page,
                    emulator=emulator,
                    out=out,
                    workspace=workspace,
                    transcript=transcripts / f"{SESSION}.jsonl",
                    earlier=earlier,
                )
            finally:
                browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        emulator.stop()


@pytest.fixture(autouse=True)
def nothing_open(editor: Editor) -> None:
    """Each step starts with no picker or input open (an earlier failed step may have left one)."""
    editor.page.keyboard.press("Escape")
    editor.page.keyboard.press("Escape")


def test_first_start_finds_the_daemon_and_follows_the_workspace_session(editor: Editor) -> None:
    gauge = editor.gauge()
    # Connected, and showing the workspace's Claude Code session without being asked.
    expect(gauge).to_have_text(re.compile(r"\d+% left · [\d.]+K/167K"))
    expect(gauge).to_have_attribute("aria-label", re.compile(f"compactd: {SESSION}"))
    editor.shot("01-first-start")
    errors = editor.page.locator(".notifications-toasts .notification-toast", has_text="compactd")
    expect(errors).to_have_count(0)
    # The output channel says which daemon runs (the venv's console script found on PATH) and
    # which transcript it follows.
    editor.run_command("Output: Show Output Channels...")
    editor.pick("compactd")
    output = editor.page.locator(".part.panel .view-lines")
    expect(output).to_contain_text(f"using the daemon from PATH: {venv_bin() / 'compactd'}")
    expect(output).to_contain_text("connected to compactd")
    expect(output).to_contain_text(f"{SESSION}.jsonl (the workspace's latest Claude Code session)")
    editor.shot("02-output-channel")
    editor.page.keyboard.press("Control+J")  # close the panel again


def test_the_session_picker_and_the_gauge(editor: Editor) -> None:
    editor.run_command("compactd: Select session…")
    expect(editor.page.locator(".quick-input-widget")).to_contain_text("compactd sessions")
    rows = editor.page.locator(".quick-input-list .monaco-list-row", has_text=SESSION)
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("following")
    editor.shot("03-session-picker")
    rows.click()
    expect(editor.gauge()).to_have_text(re.compile(r"\d+% left · [\d.]+K/167K"))
    editor.gauge().hover()
    tooltip = editor.page.locator(".monaco-hover", has_text=f"compactd: {SESSION}")
    expect(tooltip).to_be_visible()
    expect(tooltip).to_contain_text("tokens used")
    _publish(
        editor.shot("04-gauge", clip={"x": 760, "y": 560, "width": 520, "height": 240}),
        MEDIA / "gauge.png",
    )


def test_breakdown_from_its_command(editor: Editor) -> None:
    editor.run_command("compactd: Show token breakdown")
    picker = editor.page.locator(".quick-input-widget")
    expect(picker).to_contain_text(re.compile(r"[\d,]+ tokens in context"))
    expect(picker.locator(".monaco-list-row").first).to_contain_text("tokens ·")
    expect(picker).to_contain_text("tool requests")
    expect(picker).to_contain_text("tool use: ")
    _publish(
        editor.shot("05-breakdown", clip={"x": 290, "y": 0, "width": 700, "height": 420}),
        MEDIA / "breakdown.png",
    )
    # The last row (below the visible ones) writes the breakdown as a table to the output channel.
    picker.locator("input").fill("table")
    editor.pick("Show as a table")
    output = editor.page.locator(".part.panel .view-lines")
    expect(output).to_contain_text(re.compile(r"total\s+[\d,]+\s+100\.0%"))
    editor.page.keyboard.press("Control+J")
    editor.page.keyboard.press("Escape")


def test_compacting_the_followed_session_offers_compact_and_resume(editor: Editor) -> None:
    # compactd's copy of a followed session takes no writes: a compaction there would never reach
    # Claude Code. The command says so and offers what does reach it.
    before = editor.gauge_text()
    editor.emulator.reset()
    editor.run_command("compactd: Compact conversation")
    offer = editor.toast(f"Session {SESSION} follows Claude Code's transcript")
    expect(offer).to_be_visible()
    expect(offer).to_contain_text("would never reach Claude Code")
    expect(offer.get_by_role("button", name="Compact and resume in Claude Code")).to_be_visible()
    _settled(offer)
    editor.shot("06-followed-compact-offer")
    # Nothing ran: no summarizer request, no progress, the gauge as it was.
    assert not editor.emulator.requests
    expect(editor.toast("compactd: compacting")).to_have_count(0)
    assert editor.gauge_text() == before
    offer.hover()
    offer.locator(".codicon-notifications-clear").click()  # the person closes it
    expect(offer).to_have_count(0)


def _settled(element: Locator) -> None:
    """Wait for ``element``'s animations (a toast fading in) to finish, for a clear screenshot."""
    element.evaluate(
        "e => Promise.all(e.getAnimations({subtree: true}).map(a => a.finished.catch(() => null)))"
    )


def test_import_an_earlier_transcript_from_the_picker(editor: Editor) -> None:
    # The way to compaction in place: a transcript imported as compactd's own copy.
    editor.run_command("compactd: Select session…")
    editor.pick("Import a transcript file…")
    # code-server's file dialog is a quick input with the path in it.
    box = editor.page.locator(".quick-input-widget input")
    # It opens on the project folder; typing before it has would be overwritten.
    expect(box).to_have_value(re.compile(re.escape(f"{editor.workspace}/") + "$"))
    box.fill(str(editor.earlier))
    expect(
        editor.page.locator(".quick-input-list .monaco-list-row", has_text=EARLIER)
    ).to_be_visible()
    expect(box).to_have_value(str(editor.earlier))
    editor.page.locator(".quick-input-widget .monaco-button", has_text="OK").click()
    expect(editor.gauge()).to_have_attribute("aria-label", re.compile(f"compactd: {EARLIER}"))
    expect(editor.gauge()).to_have_text(re.compile(r"\d+% left · [\d.]+K/167K"))


def test_cancel_a_slow_compaction(editor: Editor) -> None:
    before = editor.gauge_text()
    progress = editor.start_compaction(model_delay_s=60)
    # The model is "thinking": wait until its request is there, then press Cancel.
    deadline = time.monotonic() + 20
    while not editor.emulator.requests and time.monotonic() < deadline:
        time.sleep(0.1)
    assert editor.emulator.requests, "the summarization request never reached the emulator"
    progress.get_by_role("button", name="Cancel").click()
    expect(editor.toast("Compaction cancelled; the conversation is unchanged.")).to_be_visible()
    expect(progress).to_have_count(0)
    assert editor.gauge_text() == before
    editor.page.keyboard.press("Escape")


def test_compact_with_progress(editor: Editor) -> None:
    before = editor.gauge_text()
    progress = editor.start_compaction(model_delay_s=4)
    # Written once per phase: no keep-alive text, no "(3014 ms) (3 s)".
    time.sleep(2.5)
    expect(progress).not_to_contain_text("Still summarizing")
    expect(progress).not_to_contain_text(" ms)")
    _publish(
        editor.shot(
            "07-compaction-in-progress", clip={"x": 780, "y": 560, "width": 500, "height": 240}
        ),
        MEDIA / "compaction-in-progress.png",
    )
    done = editor.toast(re.compile(r"Compacted [\d,]+ → [\d,]+ tokens \(\d+% freed\) in [\d.]+ s"))
    expect(done).to_be_visible()
    editor.shot("08-compacted")
    after = editor.gauge_text()
    left = lambda text: int(re.search(r"(\d+)% left", text).group(1))  # noqa: E731
    assert left(after) > left(before), (before, after)
    editor.page.keyboard.press("Escape")


def _status(transcript: Path) -> dict[str, object]:
    """What `compactd status` says of ``transcript``: the figures a fresh import gives."""
    done = subprocess.run(
        [str(venv_bin() / "compactd"), "status", "--json", str(transcript)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'clients' / 'python'}"},
    )
    status: dict[str, object] = json.loads(done.stdout)["status"]
    return status


@functools.cache
def _session_prefix() -> int:
    """The system prompt and tools of the followed session: what its real responses imply."""
    return int(_status(fixture(FIXTURE))["fixedPrefixTokens"])  # type: ignore[call-overload]


def _append(transcript: Path, entries: list[dict[str, object]]) -> int:
    """Append ``entries`` as Claude Code does: the first one's parent is the file's last line, and
    the last one, a response, reports the usage the real request would have had (what compactd
    counts of the file with these lines, its own usage left out). Returns that count."""
    text = transcript.read_text()
    uuids = [json.loads(x).get("uuid") for x in text.splitlines() if x.strip()]
    if entries[0].get("parentUuid") is None and entries[0].get("subtype") != "compact_boundary":
        entries[0]["parentUuid"] = next((u for u in reversed(uuids) if u), None)
    pending = transcript.with_name("pending.jsonl.tmp")
    pending.write_text(text + "".join(json.dumps(e) + "\n" for e in entries))
    try:
        status = _status(pending)
    finally:
        pending.unlink()
    # After a compaction a fresh import has no figure for the system prompt and tools (no response
    # reported usage since); Claude Code's request carries them all the same.
    messages = int(status["tokens"]) - int(status.get("fixedPrefixTokens", 0))  # type: ignore[call-overload]
    count = messages + _session_prefix()
    message = entries[-1]["message"]
    assert isinstance(message, dict)
    message["usage"] = {
        "input_tokens": 10,
        "cache_read_input_tokens": count - 20,
        "cache_creation_input_tokens": 0,
        "output_tokens": 10,
    }
    with transcript.open("a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries))
    return count


def _line(n: int, k: int, kind: str, content: object, **extra: object) -> dict[str, object]:
    """One line of turn ``n`` as Claude Code writes it, chained to the line before it."""
    return {
        "parentUuid": f"00000000-0000-4000-9100-{n * 10 + k - 1:012d}" if k else None,
        "isSidechain": False,
        "type": kind,
        "uuid": f"00000000-0000-4000-9100-{n * 10 + k:012d}",
        "timestamp": f"2026-11-26T12:{n:02d}:{k:02d}.000Z",
        "sessionId": SESSION,
        "message": {"role": kind, "content": content, **extra},
    }


def _answer(n: int, question: str, answer: str) -> list[dict[str, object]]:
    """A prompt and its answer, as Claude Code appends them (the usage is filled by _append)."""
    return [
        _line(n, 0, "user", question),
        _line(
            n,
            1,
            "assistant",
            [{"type": "text", "text": answer}],
            id=f"msg_live_{n}",
            type="message",
            model="claude-sonnet-4-5",
            stop_reason="end_turn",
        ),
    ]


def _turn_with_tools(n: int, read_lines: int, build_lines: int) -> list[dict[str, object]]:
    """A turn as Claude Code appends it: a prompt, a file read and a command with their results,
    and the answer."""
    listing = "".join(
        f"{i:5d}  def handler_{i}(request): return render(request)\n" for i in range(read_lines)
    )
    build = "".join(
        f"[{i:4d}/{build_lines}] compiling src/module_{i}.ts ... ok\n" for i in range(build_lines)
    )
    read = {
        "type": "tool_use",
        "id": f"t{n}a",
        "name": "Read",
        "input": {"file_path": "src/handlers.py"},
    }
    bash = {
        "type": "tool_use",
        "id": f"t{n}b",
        "name": "Bash",
        "input": {"command": "npm run build"},
    }
    return [
        _line(n, 0, "user", "Read src/handlers.py and run the build"),
        _line(n, 1, "assistant", [read], id=f"msg_t{n}a", model="claude-sonnet-4-5"),
        _line(n, 2, "user", [{"type": "tool_result", "tool_use_id": f"t{n}a", "content": listing}]),
        _line(n, 3, "assistant", [bash], id=f"msg_t{n}b", model="claude-sonnet-4-5"),
        _line(n, 4, "user", [{"type": "tool_result", "tool_use_id": f"t{n}b", "content": build}]),
        _line(
            n,
            5,
            "assistant",
            [{"type": "text", "text": "The build passes."}],
            id=f"msg_t{n}c",
            model="claude-sonnet-4-5",
        ),
    ]


def _claude_code_compaction(n: int, pre_tokens: int) -> list[dict[str, object]]:
    """Claude Code's own /compact as it appends it: the boundary, then the summary (shapes from
    the real 2.1.330 session in tests/data/transcripts/CLAUDE_COMPACT_FIXTURE)."""
    source = (fixture(CLAUDE_COMPACT_FIXTURE)).read_text().splitlines()
    boundary = next(json.loads(x) for x in source if '"compact_boundary"' in x)
    summary = next(json.loads(x) for x in source if '"isCompactSummary"' in x)
    boundary.update(
        parentUuid=None,
        logicalParentUuid=f"00000000-0000-4000-9100-{(n - 1) * 10 + 5:012d}",
        uuid=f"00000000-0000-4000-9200-{n:012d}",
        sessionId=SESSION,
        timestamp=f"2026-11-26T12:{n:02d}:00.000Z",
        compactMetadata={"trigger": "manual", "preTokens": pre_tokens},
    )
    summary.update(
        parentUuid=boundary["uuid"],
        uuid=f"00000000-0000-4000-9200-{n + 1:012d}",
        sessionId=SESSION,
        timestamp=f"2026-11-26T12:{n:02d}:01.000Z",
    )
    return [boundary, summary]


def test_follow_the_running_claude_code_session(editor: Editor) -> None:
    # Back to the workspace's running session, which the picker lists as followed.
    editor.run_command("compactd: Select session…")
    row = editor.page.locator(".quick-input-list .monaco-list-row", has_text=SESSION).first
    expect(row).to_contain_text("following")
    row.click()
    expect(editor.gauge()).to_have_attribute("aria-label", re.compile(f"compactd: {SESSION}"))
    # Claude Code reads a file and runs a command, then answers: the gauge moves without any
    # command, to the count of the grown file.
    count = _append(editor.transcript, _turn_with_tools(4, 2600, 1200))
    expect(editor.gauge()).to_have_text(re.compile(rf"\d+% left · {_short(count)}/167K"))
    # Claude Code compacts (its own /compact), then goes on: the gauge drops, then moves again.
    _append_plain(editor.transcript, _claude_code_compaction(5, count))
    count = _append(editor.transcript, _turn_with_tools(6, 900, 400))
    expect(editor.gauge()).to_have_text(re.compile(rf"\d+% left · {_short(count)}/167K"))
    count = _append(
        editor.transcript, _answer(7, "Which handlers render templates?", "All 900 of them.")
    )
    expect(editor.gauge()).to_have_text(re.compile(rf"\d+% left · {_short(count)}/167K"))
    editor.page.keyboard.press("Escape")


def _append_plain(transcript: Path, entries: list[dict[str, object]]) -> None:
    """Append lines that report no usage (a compaction's), as Claude Code writes them."""
    with transcript.open("a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries))


def _short(tokens: int) -> str:
    """The gauge's short form of a count (format.ts shortTokens), as a regex: "49.6K", "167K"."""
    value = tokens / 1000
    # JavaScript's toFixed and Python's format may round a half differently: accept either.
    if value >= 100:
        forms = {f"{value:.0f}", f"{int(value)}", f"{int(value) + 1}"}
    else:
        tenths = int(value * 10)
        forms = {f"{t / 10:.1f}".removesuffix(".0") for t in (tenths, tenths + 1)}
    return "(?:" + "|".join(re.escape(f) + "K" for f in sorted(forms)) + ")"


def _panel(editor: Editor) -> Locator:
    """The context panel's document: a webview is an iframe holding the extension's iframe."""
    frame = editor.page.frame_locator("iframe.webview").frame_locator("iframe#active-frame")
    return frame.locator("body")


def test_context_panel_from_the_gauge(editor: Editor) -> None:
    # What a fresh import of the file gives: the panel's figures must be the same.
    status = _status(editor.transcript)
    tokens, prefix = int(status["tokens"]), int(status["fixedPrefixTokens"])  # type: ignore[call-overload]
    # The prefix is the session's real one, the same after Claude Code's compaction as before.
    assert abs(prefix - _session_prefix()) <= 50, (prefix, _session_prefix())
    editor.gauge().click()
    body = _panel(editor)
    expect(body).to_contain_text("What the next request carries")
    # The heading, the bar and the legend agree: the count, and the real system prompt and tools.
    expect(body.locator("h1")).to_contain_text(f"{tokens:,} of 167,000 tokens")
    expect(body).to_contain_text(re.compile(rf"system prompt and tools\s*{prefix:,}\b"))
    expect(body.locator('svg.bar rect[data-part="prefix"]')).to_have_count(1)
    expect(body.locator('svg.bar rect[data-part="messages"]')).to_have_count(1)
    expect(body.locator('svg.bar rect[data-part="tool:Read"]')).to_have_count(1)
    expect(body.locator('svg.bar rect[data-part="tool:Bash"]')).to_have_count(1)
    expect(body).to_contain_text("Tokens over time")
    expect(body.locator("svg.history path.line")).to_have_count(1)
    # Claude Code's compaction of the earlier step is a drop; the followed responses are points.
    expect(body.locator('svg.history circle[data-kind="compactionAfter"]').first).to_be_attached()
    expect(body.locator('svg.history circle[data-kind="response"]').first).to_be_attached()
    expect(body).to_contain_text("What compact/auto would do next")
    editor.page.mouse.move(0, 0)
    _publish(editor.shot("09-context-panel-light"), MEDIA / "context-panel.png")
    _theme(editor, "Dark Modern")
    expect(editor.page.locator(".monaco-workbench.vs-dark")).to_be_attached()
    expect(body.locator('svg.bar rect[data-part="tool:Read"]')).to_have_count(1)
    editor.page.mouse.move(0, 0)
    # The theme change re-activates extensions for a moment: the status bar says so until done.
    expect(editor.page.locator(".part.statusbar")).not_to_contain_text("Activating Extensions")
    _publish(editor.shot("10-context-panel-dark"), MEDIA / "context-panel-dark.png")
    _theme(editor, "Light Modern")
    # It refreshes as the session grows.
    count = _append(editor.transcript, _answer(8, "And the tests?", "They pass."))
    expect(body.locator("h1")).to_contain_text(f"{count:,} of 167,000 tokens")


def _theme(editor: Editor, name: str) -> None:
    editor.run_command("Preferences: Color Theme")
    box = editor.page.locator(".quick-input-widget input")
    box.fill(name)
    editor.pick(name)


def test_compact_and_resume_opens_a_terminal(editor: Editor) -> None:
    editor.run_command("compactd: Compact and resume in Claude Code")
    done = editor.toast(
        re.compile(r"Compacted the Claude Code session into a new one, [0-9a-f-]+: [\d,]+ → [\d,]+")
    )
    expect(done).to_be_visible()
    new_id = re.search(r"new one, ([0-9a-f-]+):", done.inner_text()).group(1)  # type: ignore[union-attr]
    assert (editor.transcript.parent / f"{new_id}.jsonl").exists()
    terminal = editor.page.locator(".part.panel .terminal-wrapper")
    expect(terminal.first).to_be_visible()
    tabs = editor.page.locator(".part.panel")
    expect(tabs).to_contain_text("Claude Code (compactd)")
    expect(editor.page.locator(".part.panel .xterm-rows")).to_contain_text(
        f"claude --resume {new_id}"
    )
    editor.shot("11-compact-and-resume")
    # The gauge goes on with the new session, which Claude Code resumes.
    editor.gauge().hover()
    expect(editor.page.locator(".monaco-hover", has_text=f"compactd: {new_id}")).to_be_visible()
    editor.page.keyboard.press("Escape")
