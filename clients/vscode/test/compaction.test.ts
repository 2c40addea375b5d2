/**
 * Compaction through the client core against the REAL daemon: an offline full compaction with
 * its `compact/status` notifications, and a compaction cancelled through a cancellation token
 * while the summarizer waits on the loopback Anthropic API emulator (scripted to answer late).
 * Until the daemon implements `compact/full` these tests skip, and only when it answers
 * `notImplemented`; any other failure fails them.
 */

import assert from "node:assert/strict";
import { after, describe, it, type TestContext } from "node:test";
import { CancellationTokenSource } from "vscode-jsonrpc/node";

import { CompactdError, type CompactResult, type StatusNotification } from "../src/core";
import { PROJECT, conversation, startDaemon, startEmulator, waitFor, withTimeout, type Daemon, type Emulator } from "./helpers";

const NOT_IMPLEMENTED = "compact/full is not implemented by this daemon yet (it answers notImplemented)";

/** Tool results big enough that a summary is clearly smaller than what it replaces. */
const TURNS = 10;
const WORDS_PER_RESULT = 1_500;

/** How long the emulator holds the summarization request; the cancel must not wait for it. */
const SUMMARY_DELAY_S = 20;

function isNotImplemented(err: unknown): boolean {
  return err instanceof CompactdError && err.dataCode === "notImplemented";
}

describe("compaction through the client core", () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) {
      await cleanup();
    }
  });

  it("runs an offline full compaction and reports its phases", async (t: TestContext) => {
    const daemon: Daemon = await startDaemon({ summarizer: { offline: true } });
    cleanups.push(() => daemon.close());
    const { client } = daemon;
    const sid = "offline-full";
    await client.sessionOpen({ sessionId: sid, cwd: PROJECT, model: "claude-sonnet-4-5" });
    await client.sessionAppend({ sessionId: sid, entries: conversation(TURNS, sid, WORDS_PER_RESULT) });
    const before = await client.tokensStatus({ sessionId: sid });

    const notes: StatusNotification[] = [];
    client.onCompactStatus((n) => notes.push(n));
    const freshTokens: number[] = [];
    client.onTokens((e) => {
      if (e.sessionId === sid) {
        freshTokens.push(e.status.tokens);
      }
    });

    let result: CompactResult;
    try {
      result = await client.compactFull({ sessionId: sid, customInstructions: "Keep the names of the files that were fixed." });
    } catch (err) {
      if (isNotImplemented(err)) {
        t.skip(NOT_IMPLEMENTED);
        return;
      }
      throw err;
    }

    assert.ok(result.compactionId, "the result should name the compaction");
    assert.ok(result.preCompactTokens > 0);
    assert.ok(
      result.postCompactTokens < result.preCompactTokens,
      `post ${result.postCompactTokens} should be below pre ${result.preCompactTokens}`,
    );
    assert.equal(result.boundary["subtype"], "compact_boundary");

    // Notifications of this compaction: 'started' first, 'completed' last, all manual.
    const mine = await waitFor(() => {
      const ours = notes.filter((n) => n.compactionId === result.compactionId);
      return ours.some((n) => n.phase === "completed") ? ours : undefined;
    }, 5_000, "a 'completed' compact/status notification");
    assert.equal(mine[0]?.phase, "started");
    assert.equal(mine[mine.length - 1]?.phase, "completed");
    for (const n of mine) {
      assert.equal(n.sessionId, sid);
      assert.equal(n.trigger, "manual");
      assert.ok(n.elapsedMs >= 0);
    }
    assert.ok(!mine.some((n) => n.phase === "failed" || n.phase === "cancelled"));

    // compactFull refreshes the status, so listeners (the status bar) see the freed space.
    const after = await client.tokensStatus({ sessionId: sid });
    assert.ok(after.tokens < before.tokens, `tokens ${after.tokens} should be below ${before.tokens}`);
    assert.ok(after.percentLeft > before.percentLeft);
    assert.equal(freshTokens[freshTokens.length - 1], after.tokens);
    const view = await client.sessionMessages({ sessionId: sid });
    assert.equal(view.boundaryUuid, result.boundary["uuid"]);
  });

  it("lets the daemon decide with compact/auto", async (t: TestContext) => {
    const daemon: Daemon = await startDaemon({ summarizer: { offline: true } });
    cleanups.push(() => daemon.close());
    const { client } = daemon;
    const sid = "auto";
    // 40K window, 4K output: auto-compaction at 23K (docs/thresholds.md#worked-examples).
    await client.sessionOpen({ sessionId: sid, cwd: PROJECT, model: "claude-sonnet-4-5", contextWindow: 40_000, maxOutputTokens: 4_000 });
    await client.sessionAppend({ sessionId: sid, entries: conversation(2, sid) });
    let below;
    try {
      below = await client.compactAuto({ sessionId: sid });
    } catch (err) {
      if (isNotImplemented(err)) {
        t.skip("compact/auto is not implemented by this daemon yet (it answers notImplemented)");
        return;
      }
      throw err;
    }
    assert.equal(below.wasCompacted, false, "nothing is due below the threshold");
    assert.ok(below.reason, "the daemon should say why it did not compact");

    const appended = await client.sessionAppend({ sessionId: sid, entries: conversation(TURNS, `${sid}-more`, WORDS_PER_RESULT) });
    assert.ok(appended.status.isAboveAutoCompactThreshold, `only ${appended.status.tokens} tokens; test data too small`);
    const seen: number[] = [];
    client.onTokens((e) => {
      if (e.sessionId === sid) {
        seen.push(e.status.tokens);
      }
    });
    const done = await client.compactAuto({ sessionId: sid });
    assert.equal(done.wasCompacted, true, `not compacted: ${done.reason}`);
    assert.ok(done.mechanism, "the result should name the mechanism used");
    const after = await client.tokensStatus({ sessionId: sid });
    assert.ok(after.tokens < appended.status.tokens);
    assert.ok(!after.isAboveAutoCompactThreshold);
    assert.equal(seen[seen.length - 1], after.tokens);
  });

  it("cancels a running compaction with $/cancelRequest and leaves the session as it was", async (t: TestContext) => {
    const emulator: Emulator = await startEmulator();
    cleanups.push(() => emulator.close());
    await emulator.script({ delay: SUMMARY_DELAY_S });
    const daemon: Daemon = await startDaemon({
      // Frequent keep-alives so the progress feed is visible within the test's time.
      keepAliveIntervalMs: 200,
      summarizer: { baseUrl: emulator.baseUrl, apiKey: "test-key", maxRetries: 0, timeoutMs: 120_000 },
    });
    cleanups.push(() => daemon.close());
    const { client } = daemon;
    const sid = "cancelled-full";
    await client.sessionOpen({ sessionId: sid, cwd: PROJECT, model: "claude-sonnet-4-5" });
    await client.sessionAppend({ sessionId: sid, entries: conversation(TURNS, sid, WORDS_PER_RESULT) });
    const before = await client.tokensStatus({ sessionId: sid });
    const viewBefore = await client.sessionMessages({ sessionId: sid });

    const notes: StatusNotification[] = [];
    client.onCompactStatus((n) => notes.push(n));
    const source = new CancellationTokenSource();
    const running = client.compactFull({ sessionId: sid }, { token: source.token });
    const settled = running.then(
      () => "resolved" as const,
      (err: unknown) => err,
    );

    // Either the daemon refuses at once, or the summarization request reaches the emulator.
    const requested = waitFor(
      async () => ((await emulator.requests()).some((r) => r.path === "/v1/messages") ? ("requested" as const) : undefined),
      20_000,
      "the summarization request at the emulator",
    );
    const first = await Promise.race([settled, requested]);
    if (isNotImplemented(first)) {
      t.skip(NOT_IMPLEMENTED);
      return;
    }
    assert.equal(first, "requested", `compact/full settled early: ${String(first)}\n${daemon.log()}`);

    // While the model "thinks", the daemon keeps reporting progress.
    await waitFor(() => notes.find((n) => n.sessionId === sid && n.phase === "keepAlive"), 5_000, "a keepAlive notification");

    const cancelledAt = Date.now();
    source.cancel();
    const outcome = await withTimeout(settled, 10_000, "compact/full to end after the cancel");
    assert.ok(outcome instanceof CompactdError, `expected a CompactdError, got ${String(outcome)}`);
    assert.equal(outcome.dataCode, "cancelled");
    assert.ok(outcome.cancelled);
    assert.ok(
      Date.now() - cancelledAt < SUMMARY_DELAY_S * 1_000,
      "the cancel should end the request without waiting for the model's answer",
    );
    const compactionId = notes.find((n) => n.sessionId === sid)?.compactionId;
    assert.ok(compactionId, "the compaction should have announced itself");
    await waitFor(
      () => notes.find((n) => n.compactionId === compactionId && n.phase === "cancelled"),
      5_000,
      "a 'cancelled' compact/status notification",
    );
    assert.ok(!notes.some((n) => n.compactionId === compactionId && n.phase === "completed"));

    // Nothing changed: same tokens, same API view, no boundary.
    const afterCancel = await client.tokensStatus({ sessionId: sid });
    assert.equal(afterCancel.tokens, before.tokens);
    const viewAfter = await client.sessionMessages({ sessionId: sid });
    assert.equal(viewAfter.boundaryUuid ?? null, viewBefore.boundaryUuid ?? null);
    assert.equal(viewAfter.messages.length, viewBefore.messages.length);

    // And the session is not left locked: the next compaction (answered at once) commits.
    const result = await client.compactFull({ sessionId: sid });
    assert.ok(result.postCompactTokens < result.preCompactTokens);
    assert.ok((await client.tokensStatus({ sessionId: sid })).tokens < before.tokens);
  });
});
