/**
 * The VS Code glue (`extension.ts`) activated in a stand-in VS Code (fake-vscode.ts) against
 * the REAL daemon and the loopback API emulator: status bar text from token statuses and
 * threshold notifications, the breakdown command, compaction behind a cancellable progress
 * notification, and Cancel ending a slow compaction.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import { after, before, describe, it, type TestContext } from "node:test";

import { statusBarText } from "../src/format";
import { FakeVscode, fakeContext, type ProgressRun } from "./fake-vscode";
import { REPO_ROOT, conversation, daemonCommand, startEmulator, tempDir, waitFor, type Emulator } from "./helpers";

const fake = new FakeVscode();
fake.install();
// Loaded after install() so its `import * as vscode` gets the stand-in.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const ext = require("../src/extension") as typeof import("../src/extension");

const SESSION = "ext-session";

function compactionWasNotImplemented(): boolean {
  return fake.shown.some((s) => s.kind === "error" && s.message.includes("not implemented"));
}

describe("the extension in a stand-in VS Code", () => {
  let emulator: Emulator;
  let api: import("../src/extension").CompactdApi;
  const dataDir = tempDir("ext");

  before(async () => {
    emulator = await startEmulator();
    // The repository is the open folder: the daemon runs there, so it is this checkout's code.
    fake.workspaceFolder = REPO_ROOT;
    fake.settings["compactd.serverCommand"] = daemonCommand();
    fake.settings["compactd.dataDir"] = dataDir;
    fake.settings["compactd.sessionId"] = SESSION;
    fake.settings["compactd.keepAliveIntervalMs"] = 200;
    fake.settings["compactd.summarizer"] = { baseUrl: emulator.baseUrl, apiKey: "test-key", maxRetries: 0 };
    api = await ext.activate(fakeContext() as never);
  });

  after(async () => {
    await ext.deactivate();
    await emulator?.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it("registers its commands and shows the configured session in the status bar", () => {
    for (const id of [
      "compactd.compact",
      "compactd.compactWithInstructions",
      "compactd.showBreakdown",
      "compactd.selectSession",
      "compactd.refresh",
      "compactd.restart",
    ]) {
      assert.ok(fake.commands.has(id), `${id} not registered`);
    }
    assert.deepEqual(
      fake.shown.filter((s) => s.kind === "error"),
      [],
      `activation reported errors; log:\n${fake.output}`,
    );
    assert.equal(api.activeSession(), SESSION);
    const item = fake.statusItem;
    assert.ok(item.visible);
    assert.equal(item.text, "$(fold) 100% left · 0/167K");
    assert.equal(item.command, "compactd.showBreakdown");
    assert.equal(item.backgroundColor, undefined);
  });

  it("follows appends made by another extension through the API", async () => {
    const client = api.client();
    assert.ok(client, "the API should expose the running client");
    const result = await client.append(SESSION, conversation(10, SESSION, 1_500));
    assert.ok(result.status.tokens > 0);
    assert.equal(fake.statusItem.text, `$(fold) ${statusBarText(result.status)}`);
    assert.match(String(fake.statusItem.tooltip), new RegExp(`compactd: ${SESSION}`));
  });

  it("shows the token breakdown as a quick pick and a table", async () => {
    await run("compactd.showBreakdown");
    const pick = fake.quickPicks[fake.quickPicks.length - 1];
    assert.ok(pick, "no quick pick was shown");
    assert.match(String(pick.title), /tokens in context/);
    const labels = pick.items.map((i) => i.label);
    assert.ok(labels.includes("human"), labels.join(" | "));
    assert.ok(labels.some((l) => l.includes("tool result: Read")), labels.join(" | "));
    assert.match(fake.output, /category\s+tokens\s+share/);
  });

  it("asks nothing of the daemon when the instructions box is dismissed", async () => {
    const runs = fake.progress.length;
    fake.inputBoxAnswer = undefined;
    await run("compactd.compactWithInstructions");
    assert.equal(fake.progress.length, runs, "no compaction should start");
  });

  it("cancels a slow compaction from the progress notification's Cancel button", async (t: TestContext) => {
    const client = api.client()!;
    const before = await client.status(SESSION);
    await emulator.reset();
    await emulator.script({ delay: 20 });
    const shownBefore = fake.shown.length;
    const runsBefore = fake.progress.length;
    const command = run("compactd.compact");

    const progress = await waitFor(() => fake.progress[runsBefore], 5_000, "a progress notification");
    assert.equal(progress.cancellable, true);
    // Cancel once the notification shows a keep-alive AND the model call is in flight (a
    // keep-alive can come while the request is still being built).
    const inFlight = async (): Promise<"alive" | undefined> =>
      progress.reports.some((r) => r.startsWith("Still summarizing")) &&
      (await emulator.requests()).some((r) => r.path === "/v1/messages")
        ? "alive"
        : undefined;
    const outcome = await Promise.race([
      command.then(() => "ended" as const),
      waitFor(inFlight, 20_000, "a keep-alive report while the model call is in flight"),
    ]);
    if (outcome === "ended" && compactionWasNotImplemented()) {
      t.skip("compact/full is not implemented by this daemon yet (it answers notImplemented)");
      return;
    }
    assert.equal(outcome, "alive", `the compaction ended early: ${JSON.stringify(fake.shown.slice(shownBefore))}`);
    progress.cancel();
    await command;
    const messages = fake.shown.slice(shownBefore).map((s) => s.message);
    assert.ok(messages.includes("Compaction cancelled; the conversation is unchanged."), messages.join(" | "));
    assert.equal((await client.status(SESSION)).tokens, before.tokens);
  });

  it("compacts behind a progress notification and updates the status bar", async (t: TestContext) => {
    const client = api.client()!;
    const before = await client.status(SESSION);
    const shownBefore = fake.shown.length;
    const runsBefore = fake.progress.length;
    await emulator.reset(); // answer at once, whatever an earlier test scripted
    fake.inputBoxAnswer = "Keep the list of files that were fixed.";
    await run("compactd.compactWithInstructions");
    if (compactionWasNotImplemented()) {
      t.skip("compact/full is not implemented by this daemon yet (it answers notImplemented)");
      return;
    }
    const progress: ProgressRun | undefined = fake.progress[runsBefore];
    assert.ok(progress, "no progress notification");
    assert.equal(progress.title, "compactd: compacting");
    assert.ok(progress.reports.length > 0, "the notification should show the phases");
    const shown = fake.shown.slice(shownBefore);
    assert.ok(shown.some((s) => s.kind === "info" && s.message.startsWith("Compacted ")), JSON.stringify(shown));
    const after = await client.status(SESSION);
    assert.ok(after.tokens < before.tokens);
    assert.equal(fake.statusItem.text, `$(fold) ${statusBarText(after)}`);
  });

  it("warns when a session nears its limit, colours the status bar, and compacts on request", async (t: TestContext) => {
    // 60K window: effective 40K, auto-compact at 27K, warning and error at 7K (docs/thresholds.md#worked-examples).
    fake.settings["compactd.contextWindow"] = 60_000;
    await emulator.reset();
    const runsBefore = fake.progress.length;
    // The person presses "Compact now" on the warning.
    fake.answer = (shown) => (shown.kind === "warning" ? "Compact now" : undefined);
    try {
      await api.setActiveSession("ext-small");
      const shownBefore = fake.shown.length;
      const result = await api.client()!.append("ext-small", conversation(12, "ext-small", 600));
      assert.ok(result.status.isAboveErrorThreshold, `only ${result.status.tokens} tokens; test data too small`);
      const warning = await waitFor(
        () => fake.shown.slice(shownBefore).find((s) => s.kind === "warning"),
        5_000,
        "a threshold warning",
      );
      assert.deepEqual(warning.items, ["Compact now"]);
      const color = fake.statusItem.backgroundColor as { id: string } | undefined;
      assert.equal(color?.id, "statusBarItem.errorBackground");

      const outcome = await waitFor(
        () => fake.shown.slice(shownBefore).find((s) => s.kind !== "warning"),
        20_000,
        "the outcome of the compaction started from the warning",
      );
      if (compactionWasNotImplemented()) {
        t.skip("compact/full is not implemented by this daemon yet (it answers notImplemented)");
        return;
      }
      assert.ok(fake.progress.length > runsBefore, "the compaction should run behind a progress notification");
      assert.match(outcome.message, /^Compacted /);
      const after = await api.client()!.status("ext-small");
      assert.ok(after.tokens < result.status.tokens);
      assert.equal(fake.statusItem.text, `$(fold) ${statusBarText(after)}`);
    } finally {
      fake.answer = undefined;
      delete fake.settings["compactd.contextWindow"];
    }
  });

  it("stops the daemon on deactivate", async () => {
    const client = api.client()!;
    const pid = client.pid!;
    await ext.deactivate();
    assert.equal(client.running, false);
    assert.throws(() => process.kill(pid, 0), /ESRCH/, "the daemon process should be gone");
    assert.equal(api.client(), undefined);
    assert.equal(fake.statusItem.text, "$(fold) compactd: stopped");
  });
});

function run(id: string): Promise<unknown> {
  const commands = fake.module["commands"] as { executeCommand(id: string): Promise<unknown> };
  return commands.executeCommand(id);
}
