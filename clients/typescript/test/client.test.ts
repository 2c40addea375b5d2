/**
 * The client against the REAL daemon: typed methods, subscriptions, cancellation through an
 * AbortSignal, errors carrying `data.code`, attach mode and shutdown.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import {
  CompactdClient,
  CompactdError,
  DaemonNotRunningError,
  ERROR_CODES,
  METHOD_TYPES,
  NOTIFICATION_TYPES,
  type StatusNotification,
  type ThresholdNotification,
} from "../src";
import { PYTHON, conversation, startDaemon, tempDir } from "./helpers";

const CWD = fs.realpathSync(tempDir("cwd"));

describe("typed methods and subscriptions", () => {
  let daemon: Awaited<ReturnType<typeof startDaemon>>;

  before(async () => {
    daemon = await startDaemon({ summarizer: { offline: true } });
  });

  after(async () => {
    await daemon?.close();
  });

  it("has a method for every request and notification the daemon announces", () => {
    const server = daemon.client.server;
    assert.ok(server);
    assert.deepEqual([...server.methods].sort(), Object.keys(METHOD_TYPES).sort());
    assert.deepEqual([...server.notifications].sort(), Object.keys(NOTIFICATION_TYPES).sort());
  });

  it("opens, appends, reports the status and compacts", async () => {
    const { client } = daemon;
    const opened = await client.sessionOpen({ sessionId: "typed", cwd: CWD, model: "claude-sonnet-4-5" });
    assert.equal(opened.entryCount, 0);
    const entries = conversation(4);
    const appended = await client.sessionAppend({ sessionId: "typed", entries });
    assert.equal(appended.appended, entries.length);
    const status = await client.tokensStatus({ sessionId: "typed" });
    assert.equal(status.tokens, appended.status.tokens);
    const phases: StatusNotification["phase"][] = [];
    const subscription = client.onCompactStatus((note) => {
      if (note.sessionId === "typed") {
        phases.push(note.phase);
      }
    });
    try {
      const result = await client.compactFull({ sessionId: "typed" });
      assert.ok(result.postCompactTokens < result.preCompactTokens);
      // Notifications are sent before the answer, so they are all in.
      assert.equal(phases[0], "started");
      assert.equal(phases.at(-1), "completed");
    } finally {
      subscription.dispose();
    }
    const listed = await client.sessionList();
    assert.ok(listed.sessions.some((s) => s.sessionId === "typed"));
  });

  it("delivers tokens/threshold to its subscribers until they dispose", async () => {
    const { client } = daemon;
    const seen: ThresholdNotification[] = [];
    const stopped: ThresholdNotification[] = [];
    const subscription = client.onTokensThreshold((note) => seen.push(note));
    client.onTokensThreshold((note) => stopped.push(note)).dispose();
    await client.sessionOpen({ sessionId: "small", cwd: CWD, model: "claude-sonnet-4-5", contextWindow: 40_000, maxOutputTokens: 4_000 });
    const appended = await client.sessionAppend({ sessionId: "small", entries: conversation(12, 600) });
    assert.ok(appended.status.isAboveWarningThreshold, `only ${appended.status.tokens} tokens`);
    // The crossing is sent before the answer to the append that caused it.
    const warning = seen.find((n) => n.sessionId === "small" && n.level === "warning");
    assert.ok(warning, JSON.stringify(seen));
    assert.equal(warning.threshold, appended.status.warningThreshold);
    assert.deepEqual(stopped, []);
    subscription.dispose();
  });

  it("rejects with CompactdError carrying data.code, and the daemon lives on", async () => {
    const { client } = daemon;
    await assert.rejects(client.tokensStatus({ sessionId: "missing" }), (err: unknown) => {
      assert.ok(err instanceof CompactdError);
      assert.equal(err.dataCode, "sessionNotFound");
      assert.ok(ERROR_CODES.includes("sessionNotFound"));
      assert.equal(err.data["code"], "sessionNotFound");
      assert.equal(typeof err.code, "number");
      return true;
    });
    await assert.rejects(client.sessionOpen({ sessionId: "../escape", cwd: CWD }), (err: unknown) => {
      assert.ok(err instanceof CompactdError);
      assert.equal(err.dataCode, "invalidParams");
      assert.equal(err.code, -32602);
      return true;
    });
    assert.ok(client.running);
  });
});

describe("cancellation", () => {
  it("aborting the signal cancels a compaction; the session is left as it was", async () => {
    // A model API that never answers: the compaction waits in its summary until cancelled.
    const hung: http.ServerResponse[] = [];
    const api = http.createServer((_req, res) => hung.push(res));
    await new Promise<void>((resolve) => api.listen(0, "127.0.0.1", resolve));
    const { port } = api.address() as AddressInfo;
    const daemon = await startDaemon({ summarizer: { apiKey: "test-key", baseUrl: `http://127.0.0.1:${port}`, maxRetries: 0 } });
    try {
      const { client } = daemon;
      await client.sessionOpen({ sessionId: "cancel", cwd: CWD, model: "claude-sonnet-4-5" });
      await client.sessionAppend({ sessionId: "cancel", entries: conversation(4) });
      const before = await client.tokensStatus({ sessionId: "cancel" });
      const controller = new AbortController();
      const phases: string[] = [];
      const summarizing = new Promise<void>((resolve) => {
        client.onCompactStatus((note) => {
          phases.push(note.phase);
          if (note.phase === "summarizing") {
            resolve();
          }
        });
      });
      const compaction = client.compactFull({ sessionId: "cancel" }, { signal: controller.signal });
      await summarizing;
      controller.abort();
      await assert.rejects(compaction, (err: unknown) => {
        assert.ok(err instanceof CompactdError, String(err));
        assert.ok(err.cancelled);
        return true;
      });
      const afterwards = await client.tokensStatus({ sessionId: "cancel" });
      assert.equal(afterwards.tokens, before.tokens);
      assert.equal((await client.sessionStats({ sessionId: "cancel" })).compactions.length, 0);
    } finally {
      for (const res of hung) {
        res.destroy();
      }
      api.close();
      await daemon.close();
    }
  });
});

describe("lifecycle", () => {
  it("attaches to a daemon started elsewhere and shuts it down", async () => {
    const dataDir = tempDir("attach");
    const child = spawn(PYTHON, ["-m", "compactd", "serve", "--data-dir", dataDir], { stdio: ["pipe", "pipe", "ignore"] });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    try {
      const client = await CompactdClient.attach({ reader: child.stdout, writer: child.stdin }, { initializationOptions: { summarizer: { offline: true } } });
      assert.equal(client.server?.name, "compactd");
      assert.equal(client.pid, undefined, "an attached daemon is not the client's process");
      const opened = await client.sessionOpen({ cwd: CWD });
      assert.equal(opened.entryCount, 0);
      assert.equal(await client.dispose(), undefined);
      assert.equal(await exited, 0, "shutdown + exit ends the daemon cleanly");
      await assert.rejects(client.sessionList(), DaemonNotRunningError);
    } finally {
      child.kill();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("waits for the spawned daemon to exit and reports how", async () => {
    const { client, close } = await startDaemon();
    const exits: boolean[] = [];
    client.onExit((info) => exits.push(info.expected));
    const info = await client.dispose();
    assert.equal(info?.code, 0, client.stderr);
    assert.deepEqual(exits, [true]);
    assert.equal(client.running, false);
    await close();
  });

  it("says clearly when the command does not exist", async () => {
    await assert.rejects(CompactdClient.spawn({ command: ["/nonexistent/compactd", "serve"] }), (err: unknown) => {
      assert.ok(err instanceof DaemonNotRunningError);
      assert.match(err.message, /could not start '\/nonexistent\/compactd serve'.*ENOENT/);
      return true;
    });
  });
});
