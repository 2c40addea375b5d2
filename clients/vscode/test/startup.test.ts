/**
 * First start and restarts of the extension in a stand-in VS Code (fake-vscode.ts) against the
 * REAL daemon: finding it with the default settings (PATH, then the Python extension's
 * interpreter), the one "not found" toast per machine with its three ways out, one restart for a
 * burst of settings edits, the daemon's own error line in the toast, and the stale toast taken
 * back once the daemon connects.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, afterEach, before, describe, it } from "node:test";

import { FakePythonExtension, FakeVscode, disposeSubscriptions, fakeContext as newContext, type FakeContext, type Shown } from "./fake-vscode";
import { PYTHON, daemonCommand, tempDir, waitFor } from "./helpers";

const fake = new FakeVscode();
fake.install();
// eslint-disable-next-line @typescript-eslint/no-require-imports
const ext = require("../src/extension") as typeof import("../src/extension");

/** The folder of the venv's python, where `pip install` put the `compactd` console script. */
const VENV_BIN = path.dirname(PYTHON);
/** A PATH with the usual tools and no compactd. */
const BARE_PATH = ["/usr/local/bin", "/usr/bin", "/bin"].filter((d) => !fs.existsSync(path.join(d, "compactd"))).join(path.delimiter);
const NOT_FOUND_BUTTONS = ["Select interpreter", "Open settings", "Show log"];

/** The windows opened by a test; each is closed after it, as VS Code closes them. */
const windows: FakeContext[] = [];

function fakeContext(shared: Parameters<typeof newContext>[0] = {}): FakeContext {
  const context = newContext(shared);
  windows.push(context);
  return context;
}

async function closeWindows(): Promise<void> {
  await ext.deactivate();
  for (const context of windows.splice(0)) {
    disposeSubscriptions(context);
  }
}

function errors(): Shown[] {
  return fake.shown.filter((s) => s.kind === "error");
}

function starts(): number {
  return fake.output.split("\n").filter((l) => l.startsWith("starting ")).length;
}

describe("first start and restarts in a stand-in VS Code", () => {
  const saved = { PATH: process.env["PATH"], HOME: process.env["HOME"], XDG_DATA_HOME: process.env["XDG_DATA_HOME"] };
  const home = tempDir("home");
  const workspace = tempDir("workspace");

  before(() => {
    // The daemon's default data dir is under the home; keep it out of the real one.
    process.env["HOME"] = home;
    process.env["XDG_DATA_HOME"] = path.join(home, ".local", "share");
    fake.workspaceFolder = workspace;
  });

  afterEach(async () => {
    await closeWindows();
    for (const key of Object.keys(fake.settings)) {
      delete fake.settings[key];
    }
    fake.python = undefined;
  });

  after(() => {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) {
        delete process.env[key];
      } else {
        process.env[key] = value;
      }
    }
    fs.rmSync(home, { recursive: true, force: true });
    fs.rmSync(workspace, { recursive: true, force: true });
  });

  it("starts the compactd found on PATH with the default settings, and says which one", async () => {
    process.env["PATH"] = `${VENV_BIN}${path.delimiter}${BARE_PATH}`;
    const errorsBefore = errors().length;
    const api = await ext.activate(fakeContext() as never);
    assert.ok(api.client()?.running, `not connected; log:\n${fake.output}`);
    assert.equal(fake.statusItem.text, "$(fold) compactd");
    assert.ok(fake.output.includes(`using the daemon from PATH: ${path.join(VENV_BIN, "compactd")}\n`), fake.output);
    assert.deepEqual(errors().slice(errorsBefore), []);
  });

  it("falls back to the Python extension's interpreter and follows a change of interpreter", async () => {
    process.env["PATH"] = BARE_PATH;
    fake.python = new FakePythonExtension();
    fake.python.interpreter = PYTHON;
    const api = await ext.activate(fakeContext() as never);
    assert.ok(api.client()?.running, `not connected; log:\n${fake.output}`);
    assert.match(fake.output, new RegExp(`using the daemon from the Python extension's interpreter: ${escape(PYTHON)} \\(compactd \\d`));

    // An interpreter without compactd: after the restart, the "not found" toast.
    const errorsBefore = errors().length;
    fake.python.select("/usr/bin/python3");
    const toast = await waitFor(() => errors()[errorsBefore], 15_000, "the not-found toast");
    assert.deepEqual(toast.items, NOT_FOUND_BUTTONS);
    assert.match(fake.output, /the selected Python interpreter \/usr\/bin\/python3 cannot run compactd: .*compactd/);
    assert.equal(fake.statusItem.text, "$(fold) compactd: not found");

    // Back to one with compactd: connected again, and the stale toast is taken off the screen.
    fake.python.select(PYTHON);
    await waitFor(() => api.client()?.running || undefined, 15_000, "the daemon from the interpreter");
    assert.equal(toast.visible, false, "the stale not-found toast is still on screen");
    assert.ok(fake.builtins.some((b) => b.id === "notifications.hideToasts"));
    assert.equal(fake.statusItem.text, "$(fold) compactd");
  });

  it("tells once per machine that compactd was not found, with the ways out", async () => {
    process.env["PATH"] = BARE_PATH;
    const shared = fakeContext();
    const errorsBefore = errors().length;
    await ext.activate(shared as never);
    assert.equal(fake.statusItem.text, "$(fold) compactd: not found");
    const mine = errors().slice(errorsBefore);
    assert.equal(mine.length, 1, mine.map((s) => s.message).join(" | "));
    assert.match(mine[0]!.message, /compactd was not found/);
    assert.deepEqual(mine[0]!.items, NOT_FOUND_BUTTONS);
    assert.match(fake.output, /'compactd' is not on PATH/);
    mine[0]!.press(undefined); // closed

    // The next window (same machine, same global state) does not repeat it.
    await closeWindows();
    await ext.activate(fakeContext({ globalState: shared.globalState }) as never);
    assert.equal(errors().length, errorsBefore + 1, "the toast came back in the next window");
    assert.equal(fake.statusItem.text, "$(fold) compactd: not found");

    // Asked for (the status bar item runs compactd.restart), it shows again; its buttons work.
    await runCommand("compactd.restart");
    const again = errors()[errorsBefore + 1];
    assert.ok(again, "an explicit restart should say why it failed");
    // Asked again while that toast is open (perhaps unseen in the notification centre): shown again.
    await runCommand("compactd.restart");
    const third = errors()[errorsBefore + 2];
    assert.equal(third?.message, again.message);
    third!.press("Select interpreter");
    // Without the Python extension, "Select interpreter" leads to installing it.
    await waitFor(() => fake.builtins.find((b) => b.id === "workbench.extensions.search"), 5_000, "the extensions view");
    await runCommand("compactd.restart");
    errors()[errorsBefore + 3]!.press("Open settings");
    const opened = await waitFor(() => fake.builtins.find((b) => b.id === "workbench.action.openSettings"), 5_000, "the settings");
    assert.deepEqual(opened.args, ["compactd.serverCommand"]);
  });

  it("restarts once for a burst of edits, quotes the daemon's own error, and takes the toast back when it connects", async () => {
    process.env["PATH"] = `${VENV_BIN}${path.delimiter}${BARE_PATH}`;
    const api = await ext.activate(fakeContext() as never);
    assert.ok(api.client()?.running);
    const startsBefore = starts();
    const errorsBefore = errors().length;

    // Typing the command item by item in the Settings editor: each item is a change.
    const typed = [[PYTHON], [PYTHON, "-m"], [PYTHON, "-m", "compactd"], [PYTHON, "-m", "compactd", "serve", "--bogus"]];
    for (const command of typed) {
      fake.setSetting("compactd.serverCommand", command);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const toast = await waitFor(() => errors()[errorsBefore], ext.RESTART_DEBOUNCE_MS + 15_000, "the failed start's toast");
    await new Promise((resolve) => setTimeout(resolve, ext.RESTART_DEBOUNCE_MS + 500));
    assert.equal(starts() - startsBefore, 1, `one restart expected; log:\n${fake.output}`);
    assert.equal(errors().length - errorsBefore, 1, errors().map((s) => s.message).join(" | "));
    // The daemon's own words (argparse), not vscode-jsonrpc's "Pending response rejected ...".
    assert.match(toast.message, /^Starting compactd failed: .*compactd: error: unrecognized arguments: --bogus$/);
    assert.doesNotMatch(toast.message, /Pending response/);
    assert.deepEqual(toast.items, ["Open settings", "Show log"]);
    assert.equal(fake.statusItem.text, "$(fold) compactd: stopped");

    fake.setSetting("compactd.serverCommand", daemonCommand());
    await waitFor(() => api.client()?.running || undefined, ext.RESTART_DEBOUNCE_MS + 15_000, "the daemon after the fix");
    assert.equal(toast.visible, false, "the stale toast is still on screen after the daemon connected");
    assert.equal(fake.statusItem.text, "$(fold) compactd");
    assert.equal(errors().length - errorsBefore, 1);
  });
});

function runCommand(id: string): Promise<unknown> {
  const commands = fake.module["commands"] as { executeCommand(id: string): Promise<unknown> };
  return commands.executeCommand(id);
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
