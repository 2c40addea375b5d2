"""The extension in a real VS Code: code-server (VS Code 1.100 in the browser) driven by Playwright
in Debian's chromium, the way a new user meets it.

The vsix that `npm run package` builds is installed into a fresh code-server; the window opens a
project folder with default compactd settings except the summarizer's address (the loopback API
emulator) and a venv on PATH, and a home with a Claude Code transcript of that folder. Each test is
one step of the user's way, in order: the daemon starts on its own; the transcript is chosen from
the picker and the gauge shows; the breakdown opens from the gauge; a slow compaction is
cancelled and leaves the gauge as it was; a compaction runs with its progress and frees the window. A
step fails when the text a user should see does not appear. Screenshots go to
tests/editors/out/vscode/.
"""

from __future__ import annotations

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


@dataclass
class Editor:
    """One code-server window in chromium, and what the steps need around it."""

    page: Page
    emulator: Emulator
    out: Path
    workspace: Path

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

    emulator = Emulator()
    emulator.start()
    settings = {
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "workbench.colorTheme": "Default Light Modern",
        "extensions.autoCheckUpdates": False,
        "extensions.autoUpdate": False,
        "telemetry.telemetryLevel": "off",
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
                yield Editor(page=page, emulator=emulator, out=out, workspace=workspace)
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


def test_first_start_finds_the_daemon_on_path(editor: Editor) -> None:
    gauge = editor.gauge()
    # Connected, no session yet: the item invites the user to pick one.
    expect(gauge).to_have_text(re.compile(r"^\s*compactd\s*$"))
    expect(gauge).to_have_attribute("aria-label", re.compile(r"compactd"))
    editor.shot("01-first-start")
    errors = editor.page.locator(".notifications-toasts .notification-toast", has_text="compactd")
    expect(errors).to_have_count(0)
    # The output channel says which daemon runs: the venv's console script found on PATH.
    editor.run_command("Output: Show Output Channels...")
    editor.pick("compactd")
    output = editor.page.locator(".part.panel .view-lines")
    expect(output).to_contain_text(f"using the daemon from PATH: {venv_bin() / 'compactd'}")
    expect(output).to_contain_text("connected to compactd")
    editor.shot("02-output-channel")
    editor.page.keyboard.press("Control+J")  # close the panel again


def test_select_the_workspace_transcript_and_see_the_gauge(editor: Editor) -> None:
    editor.gauge().click()  # "No session selected. Click to choose one."
    expect(editor.page.locator(".quick-input-widget")).to_contain_text(
        "Claude Code transcripts of this workspace"
    )
    rows = editor.page.locator(".quick-input-list .monaco-list-row", has_text=SESSION)
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("not imported")
    editor.shot("03-session-picker")
    rows.click()
    expect(editor.gauge()).to_have_text(re.compile(r"\d+% left · [\d.]+K/167K"))
    editor.gauge().hover()
    tooltip = editor.page.locator(".monaco-hover", has_text=f"compactd: {SESSION}")
    expect(tooltip).to_be_visible()
    expect(tooltip).to_contain_text("tokens used")
    editor.shot("04-gauge", clip={"x": 760, "y": 560, "width": 520, "height": 240})


def test_breakdown_from_the_gauge(editor: Editor) -> None:
    editor.gauge().click()
    picker = editor.page.locator(".quick-input-widget")
    expect(picker).to_contain_text(re.compile(r"[\d,]+ tokens in context"))
    expect(picker.locator(".monaco-list-row").first).to_contain_text("tokens ·")
    expect(picker).to_contain_text("tool requests")
    expect(picker).to_contain_text("tool use: ")
    editor.shot("05-breakdown", clip={"x": 290, "y": 0, "width": 700, "height": 420})
    # The last row (below the visible ones) writes the breakdown as a table to the output channel.
    picker.locator("input").fill("table")
    editor.pick("Show as a table")
    output = editor.page.locator(".part.panel .view-lines")
    expect(output).to_contain_text(re.compile(r"total\s+[\d,]+\s+100\.0%"))
    editor.page.keyboard.press("Control+J")
    editor.page.keyboard.press("Escape")


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
    editor.shot("06-compaction-in-progress", clip={"x": 780, "y": 560, "width": 500, "height": 240})
    done = editor.toast(re.compile(r"Compacted [\d,]+ → [\d,]+ tokens \(\d+% freed\) in [\d.]+ s"))
    expect(done).to_be_visible()
    editor.shot("07-compacted")
    after = editor.gauge_text()
    left = lambda text: int(re.search(r"(\d+)% left", text).group(1))  # noqa: E731
    assert left(after) > left(before), (before, after)
    editor.page.keyboard.press("Escape")
