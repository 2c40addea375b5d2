"""The extension in a real VS Code: code-server (VS Code 1.100 in the browser) driven by Playwright
in Debian's chromium, the way a new user meets it.

The vsix that `npm run package` builds is installed into a fresh code-server; the window opens a
project folder with default compactd settings except the summarizer's address (the loopback API
emulator) and a venv on PATH, and a home with a Claude Code transcript of that folder. Each test is
one step of the user's way, in order: the daemon starts on its own and the gauge shows the
workspace's Claude Code session; the picker lists it as followed; the breakdown opens from its command; a slow compaction is
cancelled and leaves the gauge as it was; a compaction runs with its progress and frees the window;
the gauge moves as Claude Code appends to the transcript (the extension follows the workspace's
running Claude Code session from the start, by default); the context panel opens from the gauge with the parts of the next
request and the history (screenshots in clients/vscode/media/, light and dark); "Compact and
resume in Claude Code" opens a terminal running the resume command. A step fails when the text a
user should see does not appear. Screenshots go to tests/editors/out/vscode/.
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
    transcript: Path

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
    editor.shot("04-gauge", clip={"x": 760, "y": 560, "width": 520, "height": 240})


def test_breakdown_from_its_command(editor: Editor) -> None:
    editor.run_command("compactd: Show token breakdown")
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


def _append(transcript: Path, entries: list[dict[str, object]]) -> None:
    """Append ``entries`` as Claude Code does: the first one's parent is the file's last line."""
    uuids = [json.loads(x).get("uuid") for x in transcript.read_text().splitlines() if x.strip()]
    entries[0]["parentUuid"] = next((u for u in reversed(uuids) if u), None)
    with transcript.open("a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries))


def _answer(n: int, tokens: int) -> list[dict[str, object]]:
    """A prompt and its answer as Claude Code appends them, the answer reporting ``tokens``."""
    prompt = {
        "parentUuid": None,
        "isSidechain": False,
        "type": "user",
        "uuid": f"00000000-0000-4000-8000-{n:012d}",
        "timestamp": "2026-11-26T12:00:00.000Z",
        "sessionId": SESSION,
        "message": {"role": "user", "content": f"question {n}"},
    }
    answer = _assistant_line(n, tokens)
    answer["parentUuid"] = prompt["uuid"]
    return [prompt, answer]


def _assistant_line(n: int, tokens: int) -> dict[str, object]:
    """An assistant response as Claude Code appends it, reporting ``tokens`` of usage."""
    return {
        "parentUuid": None,
        "isSidechain": False,
        "type": "assistant",
        "uuid": f"00000000-0000-4000-9000-{n:012d}",
        "timestamp": "2026-11-26T12:00:00.000Z",
        "sessionId": SESSION,
        "message": {
            "id": f"msg_live_{n}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": f"live answer {n}"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": tokens - 20,
                "cache_creation_input_tokens": 0,
                "output_tokens": 10,
            },
        },
    }


def _turn_with_tools(n: int, tokens: int) -> list[dict[str, object]]:
    """A turn as Claude Code appends it: a prompt, a file read and a command with their results,
    and the answer reporting ``tokens`` of usage."""

    def line(k: int, kind: str, content: object, **extra: object) -> dict[str, object]:
        return {
            "parentUuid": f"00000000-0000-4000-9100-{n * 10 + k - 1:012d}" if k else None,
            "isSidechain": False,
            "type": kind,
            "uuid": f"00000000-0000-4000-9100-{n * 10 + k:012d}",
            "timestamp": "2026-11-26T12:05:00.000Z",
            "sessionId": SESSION,
            "message": {"role": kind, "content": content, **extra},
        }

    listing = "".join(
        f"{i:5d}  def handler_{i}(request): return render(request)\n" for i in range(900)
    )
    build = "".join(f"[{i:4d}/400] compiling src/module_{i}.ts ... ok\n" for i in range(400))
    usage = {"input_tokens": 10, "cache_read_input_tokens": tokens - 20, "output_tokens": 10}
    lines = [
        line(0, "user", "Read src/handlers.py and run the build"),
        line(
            1,
            "assistant",
            [
                {
                    "type": "tool_use",
                    "id": f"t{n}a",
                    "name": "Read",
                    "input": {"file_path": "src/handlers.py"},
                }
            ],
            id=f"msg_t{n}a",
        ),
        line(2, "user", [{"type": "tool_result", "tool_use_id": f"t{n}a", "content": listing}]),
        line(
            3,
            "assistant",
            [
                {
                    "type": "tool_use",
                    "id": f"t{n}b",
                    "name": "Bash",
                    "input": {"command": "npm run build"},
                }
            ],
            id=f"msg_t{n}b",
        ),
        line(4, "user", [{"type": "tool_result", "tool_use_id": f"t{n}b", "content": build}]),
        line(
            5,
            "assistant",
            [{"type": "text", "text": "The build passes."}],
            id=f"msg_t{n}c",
            model="claude-sonnet-4-5",
            usage=usage,
        ),
    ]
    return lines


def test_follow_the_running_claude_code_session(editor: Editor) -> None:
    # Claude Code reads a file and runs a command, then answers a question: the gauge moves
    # without any command.
    _append(editor.transcript, _turn_with_tools(4, 70_000))
    expect(editor.gauge()).to_have_text(re.compile(r"\d+% left · 70K/167K"))
    _append(editor.transcript, _answer(1, 120_000))
    expect(editor.gauge()).to_have_text(re.compile(r"\d+% left · 120K/167K"))
    editor.page.keyboard.press("Escape")


def _panel(editor: Editor) -> Locator:
    """The context panel's document: a webview is an iframe holding the extension's iframe."""
    frame = editor.page.frame_locator("iframe.webview").frame_locator("iframe#active-frame")
    return frame.locator("body")


def test_context_panel_from_the_gauge(editor: Editor) -> None:
    editor.gauge().click()
    body = _panel(editor)
    expect(body).to_contain_text("What the next request carries")
    expect(body.locator('svg.bar rect[data-part="prefix"]')).to_have_count(1)
    expect(body.locator('svg.bar rect[data-part="messages"]')).to_have_count(1)
    expect(body.locator('svg.bar rect[data-part="tool:Read"]')).to_have_count(1)
    expect(body.locator('svg.bar rect[data-part="tool:Bash"]')).to_have_count(1)
    expect(body).to_contain_text("Tokens over time")
    expect(body.locator("svg.history path.line")).to_have_count(1)
    # The compaction of the earlier step is a drop; the followed responses are points.
    expect(body.locator('svg.history circle[data-kind="compactionAfter"]').first).to_be_attached()
    expect(body.locator('svg.history circle[data-kind="response"]').first).to_be_attached()
    expect(body).to_contain_text("What compact/auto would do next")
    expect(body).to_contain_text("120,000")
    editor.page.mouse.move(0, 0)
    media = ROOT / "clients" / "vscode" / "media"
    shutil.copy(editor.shot("08-context-panel-light"), media / "context-panel.png")
    _theme(editor, "Dark Modern")
    expect(editor.page.locator(".monaco-workbench.vs-dark")).to_be_attached()
    expect(body.locator('svg.bar rect[data-part="tool:Read"]')).to_have_count(1)
    editor.page.mouse.move(0, 0)
    shutil.copy(editor.shot("09-context-panel-dark"), media / "context-panel-dark.png")
    _theme(editor, "Light Modern")
    # It refreshes as the session grows.
    _append(editor.transcript, _answer(2, 75_000))
    expect(body).to_contain_text("75,000")


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
    editor.shot("10-compact-and-resume")
    # The gauge goes on with the new session, which Claude Code resumes.
    editor.gauge().hover()
    expect(editor.page.locator(".monaco-hover", has_text=f"compactd: {new_id}")).to_be_visible()
    editor.page.keyboard.press("Escape")
