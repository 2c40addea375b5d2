/**
 * The pure display helpers (format.ts, transcripts.ts): status-bar text and colour level,
 * number formatting, phase wording, the breakdown table, and where Claude Code keeps a
 * workspace's transcripts. No daemon needed.
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, it } from "node:test";

import type { BreakdownResult, CompactResult, SessionInfo, StatusNotification } from "../src/core";
import { tokenStatus } from "./helpers";
import {
  breakdownRows,
  breakdownTable,
  compactionOutcome,
  formatDuration,
  groupDigits,
  humanize,
  isFinalPhase,
  levelOf,
  limitOf,
  phaseMessage,
  progressUpdate,
  sessionDescription,
  sessionRows,
  shortTokens,
  statusBarText,
  statusTooltip,
  thresholdWarning,
} from "../src/format";
import { claudeProjectDirs, projectSlug, sessionIdFor, workspaceTranscripts } from "../src/transcripts";

const status = tokenStatus;

/** A `compact/status` notification of one manual compaction. */
function note(phase: StatusNotification["phase"], message?: string): StatusNotification {
  return { sessionId: "s", compactionId: "c", phase, trigger: "manual", elapsedMs: 3_014, message };
}

describe("format", () => {
  it("shortens token counts for the status bar", () => {
    assert.equal(shortTokens(0), "0");
    assert.equal(shortTokens(999), "999");
    assert.equal(shortTokens(1_000), "1K");
    assert.equal(shortTokens(1_234), "1.2K");
    assert.equal(shortTokens(61_234), "61.2K");
    assert.equal(shortTokens(167_000), "167K");
    assert.equal(shortTokens(967_000), "967K");
    assert.equal(shortTokens(1_000_000), "1M");
    assert.equal(shortTokens(1_500_000), "1.5M");
  });

  it("groups digits independently of the locale", () => {
    assert.equal(groupDigits(0), "0");
    assert.equal(groupDigits(999), "999");
    assert.equal(groupDigits(1_234_567), "1,234,567");
  });

  it("measures against the auto-compact threshold, or the effective window when it is off", () => {
    assert.equal(limitOf(status()), 167_000);
    assert.equal(limitOf(status({ autoCompactEnabled: false })), 180_000);
    assert.equal(statusBarText(status()), "63% left · 61.2K/167K");
    assert.equal(statusBarText(status({ autoCompactEnabled: false, percentLeft: 66 })), "66% left · 61.2K/180K");
  });

  it("picks the colour level from the threshold flags", () => {
    assert.equal(levelOf(status()), "ok");
    assert.equal(levelOf(status({ isAboveWarningThreshold: true })), "warning");
    assert.equal(levelOf(status({ isAboveAutoCompactThreshold: true })), "warning");
    assert.equal(levelOf(status({ isAboveWarningThreshold: true, isAboveErrorThreshold: true })), "error");
    assert.equal(levelOf(status({ isAtBlockingLimit: true })), "error");
  });

  it("explains the numbers in the tooltip", () => {
    const tip = statusTooltip(status(), "abc");
    assert.match(tip, /^compactd: abc\n/);
    assert.match(tip, /61,234 of 167,000 tokens used, 63% left before auto-compaction/);
    assert.match(tip, /60,000 from API usage \+ 1,234 estimated/);
    const parts = statusTooltip(
      status({ fixedPrefixTokens: 15_000, messageTokens: 46_000, attachmentTokens: 234, clearedTokens: 0 }),
    );
    assert.match(parts, /system prompt and tools 15,000 \+ messages 46,000 \+ attachments 234\n/);
    assert.match(tip, /window 200,000, effective 180,000, blocking at 177,000/);
    assert.doesNotMatch(tip, /disabled|paused|off/);
    assert.match(statusTooltip(status({ autoCompactEnabled: false })), /auto-compaction is off/);
    assert.match(statusTooltip(status({ compactionEnabled: false, autoCompactEnabled: false })), /compaction is disabled/);
    assert.match(statusTooltip(status({ circuitOpen: true })), /paused after repeated failures/);
    assert.doesNotMatch(tip, /absolute level|environment/);
    assert.match(
      statusTooltip(status({ autoCompactThreshold: 200_000, autoCompactSource: "tokens" })),
      /auto-compact at 200,000: the absolute level \(autoCompactTokens\)/,
    );
    assert.match(statusTooltip(status({ autoCompactSource: "env" })), /auto-compact at 167,000: set by the environment/);
    assert.doesNotMatch(tip, /summary/);
    assert.match(
      statusTooltip(status({ preparation: { state: "ready", entriesCovered: 1_204 } })),
      /a summary is ready \(1,204 entries\): the next compaction applies it at once/,
    );
    assert.match(
      statusTooltip(status({ preparation: { state: "ready", entriesCovered: 1_204, refreshing: true } })),
      /a summary is ready \(1,204 entries\) and a fresher one is being written in the background/,
    );
    assert.match(
      statusTooltip(status({ preparation: { state: "preparing", entriesCovered: 88 } })),
      /a summary of 88 entries is being prepared in the background/,
    );
  });

  it("words compaction phases for the progress notification", () => {
    assert.equal(phaseMessage(note("summarizing")), "Summarizing the conversation");
    assert.equal(phaseMessage(note("preCompactHooks", "2 hooks")), "Running PreCompact hooks: 2 hooks");
    assert.equal(phaseMessage(note("keepAlive", "still summarizing (30012 ms)")), undefined);
    assert.ok(isFinalPhase("completed") && isFinalPhase("failed") && isFinalPhase("cancelled"));
    assert.ok(!isFinalPhase("started") && !isFinalPhase("keepAlive"));
  });

  it("writes the progress text once per phase: keep-alives and repeats add nothing", () => {
    // What the daemon sends for a compaction whose model call takes a while.
    const feed = [
      note("started"),
      note("preCompactHooks"),
      note("summarizing"),
      note("keepAlive", "still summarizing (3014 ms)"),
      note("keepAlive", "still summarizing (6020 ms)"),
      note("summarizing"),
      note("summarizing", "the API failed; building the summary offline"),
      note("rehydrating"),
      note("sessionStartHooks"),
      note("completed", "150000 -> 21000 tokens"),
    ];
    const written: string[] = [];
    let shown: string | undefined;
    for (const n of feed) {
      const text = progressUpdate(n, shown);
      if (text !== undefined) {
        written.push(text);
        shown = text;
      }
    }
    assert.deepEqual(written, [
      "Starting",
      "Running PreCompact hooks",
      "Summarizing the conversation",
      "Summarizing the conversation: the API failed; building the summary offline",
      "Restoring recent files and context",
      "Running SessionStart hooks",
    ]);
    assert.ok(!written.some((t) => /ms\)|\(\d+ s\)/.test(t)), "no elapsed-time suffixes");
  });

  it("shows durations in ms under a second", () => {
    assert.equal(formatDuration(0), "0 ms");
    assert.equal(formatDuration(12.4), "12 ms");
    assert.equal(formatDuration(999), "999 ms");
    assert.equal(formatDuration(1_000), "1 s");
    assert.equal(formatDuration(12_345), "12.3 s");
    assert.equal(formatDuration(125_000), "2 min 5 s");
  });

  it("states a compaction's outcome", () => {
    const result = { preCompactTokens: 150_000, postCompactTokens: 21_000, durationMs: 12_345 } as CompactResult;
    assert.equal(compactionOutcome(result), "Compacted 150,000 → 21,000 tokens (86% freed) in 12.3 s");
    // An offline compaction takes milliseconds: not "in 0.0 s".
    assert.equal(compactionOutcome({ ...result, durationMs: 37 }), "Compacted 150,000 → 21,000 tokens (86% freed) in 37 ms");
  });

  it("warns at the error level and at the blocking limit, with one text per level", () => {
    assert.equal(thresholdWarning(status()), undefined);
    assert.equal(thresholdWarning(status({ isAboveWarningThreshold: true })), undefined);
    const error = thresholdWarning(status({ isAboveWarningThreshold: true, isAboveErrorThreshold: true }));
    const blocking = thresholdWarning(status({ isAboveErrorThreshold: true, isAtBlockingLimit: true }));
    assert.match(String(error), /close to the auto-compaction threshold/);
    assert.match(String(blocking), /blocking limit/);
  });

  it("describes sessions without placeholder numbers", () => {
    const info = (over: Partial<SessionInfo>): SessionInfo => ({
      sessionId: "s1",
      transcriptPath: "/data/s1.jsonl",
      cwd: "/w",
      model: "claude-sonnet-4-5",
      agentKind: "main",
      open: false,
      ...over,
    });
    assert.equal(sessionDescription(info({ open: true, tokens: 21_562, entryCount: 310 })), "21,562 tokens · 310 entries");
    assert.equal(sessionDescription(info({ open: true, tokens: 0, entryCount: 1 })), "0 tokens · 1 entry");
    assert.equal(sessionDescription(info({})), "stored, not loaded");
    // An older daemon's -1 placeholders are not numbers to show either.
    assert.equal(sessionDescription(info({ tokens: -1, entryCount: -1 })), "stored, not loaded");
  });

  it("lists each transcript once, with the daemon's figures once it is imported", () => {
    const modified = new Date(Date.UTC(2026, 0, 2));
    const sessions: SessionInfo[] = [
      { sessionId: "5c03", transcriptPath: "/data/5c03.jsonl", cwd: "/w", model: "m", agentKind: "main", open: true, tokens: 26_384, entryCount: 120 },
      { sessionId: "other", transcriptPath: "/data/other.jsonl", cwd: "/w", model: "m", agentKind: "main", open: false },
    ];
    const transcripts = [
      { file: "/home/dev/.claude/projects/-w/5c03.jsonl", modified },
      { file: "/home/dev/.claude/projects/-w/9f1e.jsonl", modified },
      // The same session id under a second config dir is the same session.
      { file: "/home/dev/.config/claude/projects/-w/9f1e.jsonl", modified },
    ];
    const rows = sessionRows(sessions, transcripts);
    assert.deepEqual(
      rows.map((r) => [r.label, r.group, r.transcript]),
      [
        ["5c03", "daemon", undefined],
        ["other", "daemon", undefined],
        ["9f1e", "transcript", "/home/dev/.claude/projects/-w/9f1e.jsonl"],
      ],
    );
    assert.equal(rows[0]?.description, "26,384 tokens · 120 entries");
    assert.match(String(rows[0]?.detail), /5c03\.jsonl/);
    assert.equal(rows[1]?.description, "stored, not loaded");
    assert.ok(rows.every((r) => !/-1/.test(r.description)));
  });

  it("flattens and tabulates the breakdown", () => {
    const bd: BreakdownResult = {
      totalTokens: 10_000,
      categories: [
        { name: "toolResults", tokens: 6_000, percent: 60, count: 12 },
        { name: "human", tokens: 1_000, percent: 10, count: 3 },
        { name: "localCommandOutput", tokens: 3_000, percent: 30, count: 1 },
      ],
      toolRequests: [{ name: "Read", tokens: 500, percent: 5, count: 12 }],
      toolResults: [{ name: "Read", tokens: 6_000, percent: 60, count: 12 }],
      attachments: [],
      duplicateReads: [{ path: "/p/a.py", reads: 3, wastedTokens: 2_000 }],
      duplicateReadTokens: 2_000,
    };
    assert.equal(humanize("localCommandOutput"), "local command output");
    const rows = breakdownRows(bd);
    assert.deepEqual(
      rows.map((r) => [r.label, r.group, r.tokens]),
      [
        ["tool results", "category", 6_000],
        ["human", "category", 1_000],
        ["local command output", "category", 3_000],
        ["tool use: Read", "toolRequest", 500],
        ["tool result: Read", "toolResult", 6_000],
        ["re-read: /p/a.py", "duplicateRead", 2_000],
      ],
    );
    assert.equal(rows[5]?.percent, 20);
    const table = breakdownTable(bd).split("\n");
    assert.match(table[0] ?? "", /^category\s+tokens\s+share$/);
    // Every data row has the same width, so the numbers line up.
    const widths = new Set(table.slice(2, 2 + rows.length).map((l) => l.length));
    assert.equal(widths.size, 1, table.join("\n"));
    assert.ok(table.some((l) => /^ {2}tool result: Read\s+6,000\s+60\.0%$/.test(l)), table.join("\n"));
    assert.ok(table.some((l) => /^total\s+10,000\s+100\.0%$/.test(l)), table.join("\n"));
    assert.equal(table[table.length - 1], "duplicate file reads waste 2,000 tokens");
  });
});

describe("transcripts", () => {
  it("finds a workspace's Claude Code transcripts on Linux", () => {
    assert.deepEqual(claudeProjectDirs("/home/dev", ["/home/dev/my_project.v2"], {}, "linux"), [
      "/home/dev/.claude/projects/-home-dev-my-project-v2",
      "/home/dev/.config/claude/projects/-home-dev-my-project-v2",
    ]);
    assert.deepEqual(claudeProjectDirs("/home/dev", ["/srv/app"], { CLAUDE_CONFIG_DIR: "/etc/claude, /opt/c", XDG_CONFIG_HOME: "/x" }, "linux"), [
      "/etc/claude/projects/-srv-app",
      "/opt/c/projects/-srv-app",
      "/home/dev/.claude/projects/-srv-app",
      "/x/claude/projects/-srv-app",
    ]);
  });

  it("finds them in the macOS and Windows locations", () => {
    assert.ok(
      claudeProjectDirs("/Users/dev", ["/Users/dev/app"], {}, "darwin").includes(
        "/Users/dev/Library/Application Support/Claude/projects/-Users-dev-app",
      ),
    );
    const win = claudeProjectDirs("C:\\Users\\dev", ["c:\\src\\app"], { APPDATA: "C:\\Users\\dev\\AppData\\Roaming" }, "win32");
    // VS Code says c:\src\app, Claude Code's shell C:\src\app: both slugs are searched.
    assert.ok(win.includes("C:\\Users\\dev\\.claude\\projects\\C--src-app"), win.join("\n"));
    assert.ok(win.includes("C:\\Users\\dev\\.claude\\projects\\c--src-app"), win.join("\n"));
    assert.ok(win.includes("C:\\Users\\dev\\AppData\\Roaming\\Claude\\projects\\C--src-app"), win.join("\n"));
  });

  it("lists the transcripts of every location, newest first, each file once", async () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), "compactd-home-"));
    try {
      const cwd = path.join(home, "work", "app");
      fs.mkdirSync(cwd, { recursive: true });
      const slug = projectSlug(cwd);
      const put = (dir: string, name: string, ageS: number): string => {
        fs.mkdirSync(dir, { recursive: true });
        const file = path.join(dir, name);
        fs.writeFileSync(file, "{}\n");
        const t = new Date(Date.now() - ageS * 1_000);
        fs.utimesSync(file, t, t);
        return file;
      };
      const old = put(path.join(home, ".claude", "projects", slug), "a.jsonl", 60);
      const fresh = put(path.join(home, "cfg", "projects", slug), "b.jsonl", 1);
      put(path.join(home, ".claude", "projects", slug), "notes.txt", 1);
      // A config dir that is a symlink to another one must not list its files twice.
      fs.symlinkSync(path.join(home, ".claude"), path.join(home, "alias"));
      const env = { CLAUDE_CONFIG_DIR: `${path.join(home, "cfg")},${path.join(home, "alias")}`, XDG_CONFIG_HOME: path.join(home, "none") };
      const found = await workspaceTranscripts(home, cwd, 20, env);
      const viaAlias = path.join(home, "alias", "projects", slug, "a.jsonl");
      assert.deepEqual(
        found.map((t) => t.file),
        [fresh, viaAlias],
      );
      assert.equal(fs.realpathSync(viaAlias), fs.realpathSync(old));
      assert.equal(sessionIdFor(fresh), "b");
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
  });
});
