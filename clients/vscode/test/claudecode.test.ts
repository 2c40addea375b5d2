/**
 * The extension with a running Claude Code session in its workspace, in a stand-in VS Code
 * (fake-vscode.ts) against the REAL daemon: it follows the workspace's latest transcript by
 * default and its gauge moves as lines are appended to the file; the gauge opens the context
 * panel (the bar of parts, the history with the compaction as a drop, what compact/auto would do),
 * which refreshes as the session grows; a newer session of the workspace takes over; "Compact and
 * resume in Claude Code" writes a new session and runs its resume command in a terminal; the
 * setting turns following off. The transcripts are a real Claude Code 2.1.330 session moved into a
 * temporary project folder, found through CLAUDE_CONFIG_DIR as the extension finds them.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";

import { barParts, contextHtml, historySteps, previewSentence } from "../src/contextview";
import { CompactdError, type BreakdownResult, type HistoryResult, type TokenStatus } from "../src/core";
import { projectSlug } from "../src/transcripts";
import { FakeVscode, fakeContext } from "./fake-vscode";
import { CC_FIXTURE_SESSION, ccFixtureIn, daemonCommand, liveAnswer, tempDir, tokenStatus, waitFor } from "./helpers";

const fake = new FakeVscode();
fake.install();
// Loaded after install() so their `import * as vscode` gets the stand-in.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const ext = require("../src/extension") as typeof import("../src/extension");
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { resumeError, TERMINAL_NAME } = require("../src/resume") as typeof import("../src/resume");
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { RESUME_INSTEAD } = require("../src/compaction") as typeof import("../src/compaction");

const FIXTURE_SESSION = CC_FIXTURE_SESSION;

/** A status of `tokens` against a 155,000-token auto-compact threshold. */
function status(tokens: number, extra: Partial<TokenStatus> = {}): TokenStatus {
  return tokenStatus({
    tokens,
    exactTokens: tokens,
    estimatedTokens: 0,
    maxOutputTokens: 32_000,
    effectiveWindow: 168_000,
    autoCompactThreshold: 155_000,
    warningThreshold: 135_000,
    errorThreshold: 135_000,
    blockingLimit: 165_000,
    percentLeft: Math.round(100 - (tokens / 155_000) * 100),
    ...extra,
  });
}

describe("the context picture (pure)", () => {
  const bd: BreakdownResult = {
    totalTokens: 60_000,
    categories: [
      { name: "fixedPrefix", tokens: 20_000, percent: 33, count: 1 },
      { name: "human", tokens: 5_000, percent: 8, count: 3 },
      { name: "assistant", tokens: 7_000, percent: 12, count: 3 },
      { name: "toolRequests", tokens: 1_000, percent: 2, count: 3 },
      { name: "toolResults", tokens: 25_000, percent: 42, count: 3 },
      { name: "attachments", tokens: 3_000, percent: 5, count: 1 },
      { name: "clearedByMicrocompact", tokens: -1_000, percent: -2, count: 1 },
    ],
    toolRequests: [],
    toolResults: [
      { name: "Read", tokens: 15_000, percent: 25, count: 2 },
      { name: "Bash", tokens: 10_000, percent: 17, count: 1 },
    ],
    attachments: [{ name: "file", tokens: 3_000, percent: 5, count: 1 }],
    duplicateReads: [],
    duplicateReadTokens: 0,
  };

  it("draws the parts of the next request in order, tool results by tool, largest first", () => {
    const parts = barParts(bd);
    assert.deepEqual(
      parts.map((p) => [p.id, p.tokens]),
      [
        ["prefix", 20_000],
        ["messages", 13_000],
        ["tool:Read", 15_000],
        ["tool:Bash", 10_000],
        ["attachments", 3_000],
        ["cleared", 1_000],
      ],
    );
  });

  it("folds the smallest tools into one segment beyond the legible count", () => {
    const many = { ...bd, toolResults: Array.from({ length: 9 }, (_, i) => ({ name: `T${i}`, tokens: 1000 + i, percent: 1, count: 1 })) };
    const tools = barParts(many).filter((p) => p.id.startsWith("tool:"));
    assert.equal(tools.length, 6);
    assert.equal(tools[0]!.id, "tool:T8");
    assert.equal(tools[5]!.id, "tool:*");
    // The four smallest named ones plus what the category holds beyond the named tools.
    assert.equal(tools[5]!.tokens, 1000 + 1001 + 1002 + 1003 + (25_000 - many.toolResults.reduce((s, t) => s + t.tokens, 0)));
  });

  it("draws a compaction as a drop at its boundary and ends at the size now", () => {
    const history: HistoryResult = {
      points: [
        { entryIndex: 3, tokens: 50_000, timestamp: "2026-01-02T03:04:05.000Z" },
        { entryIndex: 9, tokens: 120_000 },
        { entryIndex: 14, tokens: 40_000 },
      ],
      compactions: [
        { entryIndex: 11, compactionId: "c1", trigger: "manual", mechanism: "full", preTokens: 121_000, postTokens: 30_000, undone: false },
        { entryIndex: 12, compactionId: "c2", trigger: "auto", mechanism: "full", preTokens: 30_000, postTokens: 9_000, undone: true },
      ],
      entryCount: 16,
    };
    const steps = historySteps(history, status(42_000));
    assert.deepEqual(
      steps.map((s) => [s.x, s.tokens, s.kind]),
      [
        [3, 50_000, "response"],
        [9, 120_000, "response"],
        [11, 121_000, "compactionBefore"],
        [11, 30_000, "compactionAfter"],
        [14, 40_000, "response"],
        [16, 42_000, "now"],
      ],
    );
    assert.match(steps[0]!.label, /50,000 tokens at 2026-01-02 03:04:05/);
  });

  it("is one document with a strict policy, no script and nothing from the network", () => {
    const html = contextHtml(
      {
        sessionId: "s<1>",
        status: status(60_000),
        breakdown: bd,
        history: { points: [{ entryIndex: 1, tokens: 60_000 }], compactions: [], entryCount: 2 },
        preview: { mechanism: "none", wouldCompact: false, preTokens: 60_000, estimatedPostTokens: 60_000, entriesSummarized: 0, entriesKept: 4, reason: "below the threshold." },
      },
      "N0nce",
      "vscode-webview://x",
    );
    assert.match(html, /<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src vscode-webview:\/\/x; style-src 'nonce-N0nce';/);
    assert.doesNotMatch(html, /<script|javascript:|https?:\/\/|style="/i);
    assert.match(html, /<style nonce="N0nce">/);
    assert.match(html, /session s&lt;1&gt;/);
    assert.match(html, /var\(--vscode-charts-blue\)/);
    assert.match(html, /Nothing yet \(below the threshold\)\./);
    // The heading's figures are the gauge's: the percentage left is of the auto-compact threshold.
    assert.match(html, /60,000 of 155,000 tokens · \d+% left before auto-compaction/);
  });

  it("says what compact/auto would do in a sentence", () => {
    const s = previewSentence({ mechanism: "micro", wouldCompact: true, preTokens: 160_000, estimatedPostTokens: 120_000, entriesSummarized: 0, entriesKept: 10 });
    assert.equal(s, "It would clear old tool results (microcompact): 160,000 → about 120,000 tokens.");
  });

  it("words what a person can do about a failed compact and resume", () => {
    assert.match(resumeError(new CompactdError(-32000, "no assistant response", { code: "notEnoughMessages" })), /Let Claude Code answer at least once/);
    assert.match(resumeError(new CompactdError(-32602, "online needs a key", { code: "invalidParams" })), /ANTHROPIC_API_KEY/);
  });
});

describe("the extension beside a running Claude Code session", () => {
  let api: import("../src/extension").CompactdApi;
  const root = tempDir("claude");
  const project = path.join(root, "project");
  const config = path.join(root, "claude-config");
  const folder = path.join(config, "projects", projectSlug(project));
  const transcript = path.join(folder, `${FIXTURE_SESSION}.jsonl`);
  const dataDir = path.join(root, "data");
  const savedConfigDir = process.env["CLAUDE_CONFIG_DIR"];

  /** An assistant line as Claude Code appends it, reporting `tokens` of usage. */
  const line = (n: number, tokens: number, sessionId = FIXTURE_SESSION): string => liveAnswer(n, tokens, sessionId, project);

  before(async () => {
    fs.mkdirSync(project, { recursive: true });
    fs.mkdirSync(folder, { recursive: true });
    fs.writeFileSync(path.join(project, "notes.txt"), Array.from({ length: 50 }, (_, i) => `note line ${i + 1}\n`).join(""));
    fs.writeFileSync(transcript, ccFixtureIn(project));
    process.env["CLAUDE_CONFIG_DIR"] = config;
    fake.workspaceFolder = project;
    fake.settings["compactd.serverCommand"] = daemonCommand();
    fake.settings["compactd.dataDir"] = dataDir;
    fake.settings["compactd.summarizer"] = { offline: true };
    api = await ext.activate(fakeContext() as never);
  });

  after(async () => {
    await ext.deactivate();
    if (savedConfigDir === undefined) delete process.env["CLAUDE_CONFIG_DIR"];
    else process.env["CLAUDE_CONFIG_DIR"] = savedConfigDir;
    fs.rmSync(root, { recursive: true, force: true });
  });

  const run = async (id: string): Promise<unknown> => {
    const handler = fake.commands.get(id);
    assert.ok(handler, `${id} not registered`);
    return handler();
  };

  it("follows the workspace's latest Claude Code session at startup", () => {
    assert.deepEqual(fake.shown.filter((s) => s.kind === "error"), [], fake.output);
    assert.equal(api.activeSession(), FIXTURE_SESSION);
    assert.equal(api.followedTranscript(), transcript);
    assert.match(fake.output, /following .*959f8b37.*latest Claude Code session/);
  });

  it("moves the gauge as Claude Code appends to the transcript", async () => {
    const before = fake.statusItem.text;
    fs.appendFileSync(transcript, line(1, 90_000));
    const moved = await waitFor(() => (fake.statusItem.text.includes("90K") ? fake.statusItem.text : undefined), 10_000, `the gauge to show 90K (was ${before})`);
    assert.notEqual(moved, before);
    // A line written in two pieces counts once whole.
    const next = line(2, 100_000);
    fs.appendFileSync(transcript, next.slice(0, 40));
    fs.appendFileSync(transcript, next.slice(40));
    await waitFor(() => (fake.statusItem.text.includes("100K") ? true : undefined), 10_000, "the gauge to show 100K");
  });

  it("opens the context panel from the gauge, with the parts, the history and the next step", async () => {
    assert.equal(fake.statusItem.command, "compactd.showContext");
    await run(fake.statusItem.command!);
    const panel = fake.panels[fake.panels.length - 1];
    assert.ok(panel, "no webview panel was created");
    assert.equal(panel.options["enableScripts"], false);
    const html = panel.webview.html;
    assert.equal(html, api.contextHtml());
    for (const part of ["prefix", "messages", "tool:Bash"]) {
      assert.match(html, new RegExp(`data-part="${part.replace("*", "\\*")}"`), `no ${part} segment`);
    }
    assert.match(html, /data-kind="compactionAfter"/, "the fixture's compaction should show as a drop");
    assert.match(html, /data-kind="now"/);
    assert.match(html, /What compact\/auto would do next/);
    assert.match(html, /following the Claude Code transcript/);
    assert.match(html, /100,000 tokens/);
  });

  it("refreshes the panel as the session grows", async () => {
    fs.appendFileSync(transcript, line(3, 110_000));
    const panel = fake.panels[fake.panels.length - 1]!;
    await waitFor(() => (panel.webview.html.includes("110,000 tokens") ? true : undefined), 10_000, "the panel to show the new response");
  });

  it("refuses to compact compactd's copy of a followed session, offering Compact and resume instead", async () => {
    const before = fake.statusItem.text;
    const progressBefore = fake.progress.length;
    const compactions = (await api.client()!.tokensHistory({ sessionId: FIXTURE_SESSION })).compactions.length;
    const running = run("compactd.compact");
    const warning = await waitFor(
      () => fake.shown.find((s) => s.kind === "warning" && s.open && s.message.includes("follows Claude Code's transcript")),
      10_000,
      "the warning on a followed session",
    );
    assert.deepEqual(warning.items, [RESUME_INSTEAD]);
    assert.match(warning.message, new RegExp(`Session ${FIXTURE_SESSION} follows`));
    warning.press(undefined); // the person closes it
    await running;
    // Nothing ran: no compaction progress, no terminal, the session as it was.
    assert.equal(fake.progress.length, progressBefore);
    assert.equal(fake.terminals.length, 0);
    assert.equal(fake.statusItem.text, before);
    assert.equal((await api.client()!.tokensHistory({ sessionId: FIXTURE_SESSION })).compactions.length, compactions);
    assert.deepEqual(fake.shown.filter((s) => s.kind === "error"), [], fake.output);
  });

  it("compacts into a new Claude Code session and resumes it in a terminal, from the warning's button", async () => {
    const original = fs.readFileSync(transcript);
    fake.answer = (shown) => (shown.items.includes(RESUME_INSTEAD) ? RESUME_INSTEAD : undefined);
    try {
      await run("compactd.compact");
    } finally {
      fake.answer = undefined;
    }
    assert.deepEqual(fake.shown.filter((s) => s.kind === "error"), [], fake.output);
    const terminal = fake.terminals[fake.terminals.length - 1];
    assert.ok(terminal, "no terminal was opened");
    assert.equal(terminal.name, TERMINAL_NAME);
    assert.equal(terminal.options.cwd, project);
    assert.ok(terminal.shown);
    const [command] = terminal.sent;
    const id = /claude --resume ([0-9a-f-]+)/.exec(command ?? "")?.[1];
    assert.ok(id, `not a resume command: ${command}`);
    assert.ok(fs.existsSync(path.join(folder, `${id}.jsonl`)), "the new session should be beside the original");
    assert.deepEqual(fs.readFileSync(transcript), original, "the original transcript must not change");
    const notice = fake.shown.find((s) => s.kind === "info" && s.message.includes(id));
    assert.ok(notice, JSON.stringify(fake.shown.map((s) => s.message)));
    assert.match(notice.message, /[\d,]+ → [\d,]+ tokens/);
    // The gauge follows the new session, where Claude Code goes on.
    assert.equal(api.activeSession(), id);
    assert.equal(api.followedTranscript(), path.join(folder, `${id}.jsonl`));
  });

  it("switches to a newer session of the workspace when one appears", async () => {
    const newer = "11111111-2222-4333-8444-555555555555";
    const file = path.join(folder, `${newer}.jsonl`);
    const user = { type: "user", uuid: "u-newer", parentUuid: null, sessionId: newer, cwd: project, timestamp: new Date().toISOString(), message: { role: "user", content: "hello" } };
    fs.writeFileSync(file, JSON.stringify(user) + "\n" + line(50, 12_000, newer));
    // The notice comes once the switch is done.
    const notice = (): boolean | undefined =>
      fake.shown.some((s) => s.kind === "info" && s.message.includes(`follows the newer Claude Code session ${newer}`)) || undefined;
    await waitFor(notice, 15_000, "the switch to the newer session");
    assert.equal(api.activeSession(), newer);
    assert.equal(api.followedTranscript(), file);
    // The daemon reads only the session on display.
    const following = (await api.client()!.sessionList()).sessions.filter((s) => s.following).map((s) => s.sessionId);
    assert.deepEqual(following, [newer]);
  });

  it("stops following when the setting is turned off", async () => {
    const shown = api.activeSession();
    fake.setSetting("compactd.followClaudeCode", false);
    const listed = async (): Promise<boolean | undefined> =>
      (await api.client()!.sessionList()).sessions.find((s) => s.sessionId === shown)?.following;
    // `following` is left out of the answer when false.
    await waitFor(async () => ((await listed()) !== true ? true : undefined), 10_000, "the daemon to stop following");
    assert.equal(api.followedTranscript(), undefined);
    assert.equal(api.activeSession(), shown, "the session stays on display");
  });
});
