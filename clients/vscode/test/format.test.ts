/**
 * The pure display helpers (format.ts, transcripts.ts): status-bar text and colour level,
 * number formatting, phase wording, the breakdown table, and where Claude Code keeps a
 * workspace's transcripts. No daemon needed.
 */

import assert from "node:assert/strict";
import * as path from "node:path";
import { describe, it } from "node:test";

import type { BreakdownResult, CompactResult, StatusNotification, TokenStatus } from "../src/core";
import {
  breakdownRows,
  breakdownTable,
  compactionOutcome,
  groupDigits,
  humanize,
  isFinalPhase,
  levelOf,
  limitOf,
  phaseMessage,
  shortTokens,
  statusBarText,
  statusTooltip,
} from "../src/format";
import { claudeProjectDir } from "../src/transcripts";

function status(overrides: Partial<TokenStatus> = {}): TokenStatus {
  return {
    tokens: 61_234,
    exactTokens: 60_000,
    estimatedTokens: 1_234,
    contextWindow: 200_000,
    maxOutputTokens: 64_000,
    effectiveWindow: 180_000,
    autoCompactThreshold: 167_000,
    warningThreshold: 147_000,
    errorThreshold: 147_000,
    blockingLimit: 177_000,
    percentLeft: 63,
    isAboveWarningThreshold: false,
    isAboveErrorThreshold: false,
    isAboveAutoCompactThreshold: false,
    isAtBlockingLimit: false,
    autoCompactEnabled: true,
    compactionEnabled: true,
    circuitOpen: false,
    ...overrides,
  };
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
    assert.match(tip, /window 200,000, effective 180,000, blocking at 177,000/);
    assert.doesNotMatch(tip, /disabled|paused|off/);
    assert.match(statusTooltip(status({ autoCompactEnabled: false })), /auto-compaction is off/);
    assert.match(statusTooltip(status({ compactionEnabled: false, autoCompactEnabled: false })), /compaction is disabled/);
    assert.match(statusTooltip(status({ circuitOpen: true })), /paused after repeated failures/);
  });

  it("words compaction phases for the progress notification", () => {
    const note = (phase: StatusNotification["phase"], elapsedMs: number, message?: string): StatusNotification => ({
      sessionId: "s",
      compactionId: "c",
      phase,
      trigger: "manual",
      elapsedMs,
      message,
    });
    assert.equal(phaseMessage(note("summarizing", 1_400)), "Summarizing the conversation (1 s)");
    assert.equal(phaseMessage(note("keepAlive", 30_000)), "Still summarizing (30 s)");
    assert.equal(phaseMessage(note("preCompactHooks", 0, "2 hooks")), "Running PreCompact hooks: 2 hooks (0 s)");
    assert.ok(isFinalPhase("completed") && isFinalPhase("failed") && isFinalPhase("cancelled"));
    assert.ok(!isFinalPhase("started") && !isFinalPhase("keepAlive"));
  });

  it("states a compaction's outcome", () => {
    const result = { preCompactTokens: 150_000, postCompactTokens: 21_000, durationMs: 12_345 } as CompactResult;
    assert.equal(compactionOutcome(result), "Compacted 150,000 → 21,000 tokens (86% freed) in 12.3 s");
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
  it("finds a workspace's Claude Code transcripts", () => {
    assert.equal(
      claudeProjectDir("/home/dev", "/home/dev/my_project.v2", {}),
      path.join("/home/dev/.claude/projects/-home-dev-my-project-v2"),
    );
    assert.equal(
      claudeProjectDir("/home/dev", "/srv/app", { CLAUDE_CONFIG_DIR: "/etc/claude" }),
      path.join("/etc/claude/projects/-srv-app"),
    );
  });
});
