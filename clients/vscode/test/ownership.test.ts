/**
 * Two VS Code windows on one workspace: each runs a daemon of its own on the same data dir, and a
 * session has one owner at a time (docs/durability.md#ownership). Here "the other window" is a
 * real daemon that already follows the workspace's Claude Code session and owns a session of its
 * own; the extension, in a stand-in VS Code (fake-vscode.ts) against another real daemon, then
 * follows the same transcript under the next id (`<id>-2`), stable across a reload, with a gauge
 * that moves; a session the other window owns is shown read-only with a quiet notice, and a
 * compaction of it says where to run it instead of failing.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";

import { CompactdClient } from "../src/core";
import { followIds, writeRefusal } from "../src/format";
import { projectSlug } from "../src/transcripts";
import { FakeVscode, disposeSubscriptions, fakeContext, type FakeContext } from "./fake-vscode";
import { CC_FIXTURE_SESSION, REPO_ROOT, ccFixtureIn, conversation, daemonCommand, liveAnswer, tempDir, waitFor } from "./helpers";

const fake = new FakeVscode();
fake.install();
// eslint-disable-next-line @typescript-eslint/no-require-imports
const ext = require("../src/extension") as typeof import("../src/extension");

const SESSION = CC_FIXTURE_SESSION;

describe("the ids a window follows a Claude Code session under (pure)", () => {
  it("tries the session's own id first, then numbered ones, always in the same order", () => {
    assert.deepEqual(followIds("abc", 3), ["abc", "abc-2", "abc-3"]);
    assert.deepEqual(followIds("abc", 1), ["abc"]);
  });

  it("says what to do about a write the daemon refused", () => {
    assert.match(writeRefusal("sessionFollowed", { sessionId: "s1" }) ?? "", /Compact and resume in Claude Code/);
    assert.match(writeRefusal("sessionReadOnly", { sessionId: "s1" }) ?? "", /read-only in this window/);
    assert.match(writeRefusal("sessionLocked", { sessionId: "s1", holderPid: 4242, holderHost: "box" }) ?? "", /pid 4242 on box/);
    assert.equal(writeRefusal("invalidParams", {}), undefined);
  });
});

describe("a second VS Code window on the same workspace", () => {
  const root = tempDir("owners");
  const project = path.join(root, "project");
  const config = path.join(root, "claude-config");
  const folder = path.join(config, "projects", projectSlug(project));
  const transcript = path.join(folder, `${SESSION}.jsonl`);
  const dataDir = path.join(root, "data");
  const savedConfigDir = process.env["CLAUDE_CONFIG_DIR"];
  let other: CompactdClient;
  let api: import("../src/extension").CompactdApi;
  let context: FakeContext;

  const answer = (n: number, tokens: number): string => liveAnswer(n, tokens, SESSION, project);

  before(async () => {
    fs.mkdirSync(project, { recursive: true });
    fs.mkdirSync(folder, { recursive: true });
    fs.writeFileSync(transcript, ccFixtureIn(project));
    process.env["CLAUDE_CONFIG_DIR"] = config;
    // The first window's daemon: it follows the Claude Code session and owns a session of its own.
    other = new CompactdClient({ command: daemonCommand(), dataDir, cwd: REPO_ROOT });
    await other.start();
    await other.initialize({ summarizer: { offline: true } });
    await other.sessionOpen({ sessionId: SESSION, cwd: project, transcriptPath: transcript, follow: true });
    await other.sessionOpen({ sessionId: "mine", cwd: project });
    await other.sessionAppend({ sessionId: "mine", entries: conversation(3, "mine") });
    fake.workspaceFolder = project;
    fake.settings["compactd.serverCommand"] = daemonCommand();
    fake.settings["compactd.dataDir"] = dataDir;
    fake.settings["compactd.summarizer"] = { offline: true };
    context = fakeContext();
    api = await ext.activate(context as never);
  });

  after(async () => {
    await ext.deactivate();
    await other.dispose();
    if (savedConfigDir === undefined) delete process.env["CLAUDE_CONFIG_DIR"];
    else process.env["CLAUDE_CONFIG_DIR"] = savedConfigDir;
    fs.rmSync(root, { recursive: true, force: true });
  });

  it("follows the Claude Code session under the next id, with no error shown", async () => {
    assert.deepEqual(fake.shown.filter((s) => s.kind === "error"), [], fake.output);
    assert.equal(api.activeSession(), `${SESSION}-2`);
    assert.equal(api.followedTranscript(), transcript);
    assert.match(fake.output, new RegExp(`${SESSION} is followed by another compactd \\(pid ${other.pid}\\)`));
    const listed = (await api.client()!.sessionList()).sessions;
    assert.equal(listed.find((s) => s.sessionId === `${SESSION}-2`)?.following, true);
  });

  it("moves both windows' gauges as Claude Code appends", async () => {
    fs.appendFileSync(transcript, answer(1, 90_000));
    await waitFor(() => (fake.statusItem.text.includes("90K") ? true : undefined), 10_000, `this window's gauge to show 90K (${fake.statusItem.text})`);
    await waitFor(async () => ((await other.tokensStatus({ sessionId: SESSION })).tokens === 90_000 ? true : undefined), 10_000, "the other window's count to follow");
  });

  it("finds the same id again after a reload", async () => {
    await ext.deactivate();
    disposeSubscriptions(context);
    context = fakeContext({ workspaceState: context.workspaceState, globalState: context.globalState });
    api = await ext.activate(context as never);
    assert.equal(api.activeSession(), `${SESSION}-2`);
    assert.equal(api.followedTranscript(), transcript);
  });

  it("shows a session the other window owns read-only, with a quiet notice", async () => {
    await api.setActiveSession("mine");
    assert.equal(api.activeSession(), "mine");
    const notice = fake.shown.find((s) => s.kind === "info" && s.message.includes("Session mine is open in another compactd"));
    assert.ok(notice, JSON.stringify(fake.shown.map((s) => s.message)));
    assert.match(notice.message, new RegExp(`pid ${other.pid}`));
    assert.match(notice.message, /shown read-only here/);
    assert.match(fake.statusItem.text, /\d+% left/);
  });

  it("says where to compact it instead of failing", async () => {
    const progressBefore = fake.progress.length;
    await (fake.commands.get("compactd.compact")!() as Promise<unknown>);
    const warning = fake.shown.find((s) => s.kind === "warning" && s.message.includes("Session mine is shown read-only"));
    assert.ok(warning, JSON.stringify(fake.shown.map((s) => s.message)));
    assert.equal(fake.progress.length, progressBefore, "no compaction ran");
    assert.deepEqual(fake.shown.filter((s) => s.kind === "error"), [], fake.output);
    // The owner's session is as it was.
    assert.equal((await other.tokensHistory({ sessionId: "mine" })).compactions.length, 0);
  });
});
