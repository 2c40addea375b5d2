/**
 * What the extension shows a person, as plain functions of protocol results: the status-bar text
 * and tooltip for a token status, the wording of compaction phases, the token breakdown as rows
 * and as a text table, and the one-line outcome of a compaction. Pure (no VS Code, no I/O) so the
 * node test runner checks them directly.
 */

import type { BreakdownResult, CompactResult, StatusNotification, TokenStatus } from "./core";

/** How alarming a token status is; picks the status bar's colour. */
export type Level = "ok" | "warning" | "error";

/** The budget `percentLeft` is measured against: the auto-compact threshold when it is on. */
export function limitOf(status: TokenStatus): number {
  return status.autoCompactEnabled ? status.autoCompactThreshold : status.effectiveWindow;
}

/** 1234 -> "1.2K", 167000 -> "167K", 1000000 -> "1M": short enough for the status bar. */
export function shortTokens(n: number): string {
  const abs = Math.abs(n);
  const scaled = (value: number, unit: string): string => {
    const text = value >= 100 ? value.toFixed(0) : value.toFixed(1).replace(/\.0$/, "");
    return text + unit;
  };
  if (abs >= 1_000_000) {
    return scaled(n / 1_000_000, "M");
  }
  if (abs >= 1_000) {
    return scaled(n / 1_000, "K");
  }
  return String(n);
}

/** 1234567 -> "1,234,567" regardless of the machine's locale (tables must line up). */
export function groupDigits(n: number): string {
  return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

export function levelOf(status: TokenStatus): Level {
  if (status.isAtBlockingLimit || status.isAboveErrorThreshold) {
    return "error";
  }
  if (status.isAboveWarningThreshold || status.isAboveAutoCompactThreshold) {
    return "warning";
  }
  return "ok";
}

/** e.g. "63% left · 61.2K/167K"; the codicon prefix is the caller's business. */
export function statusBarText(status: TokenStatus): string {
  return `${status.percentLeft}% left · ${shortTokens(status.tokens)}/${shortTokens(limitOf(status))}`;
}

export function statusTooltip(status: TokenStatus, sessionLabel?: string): string {
  const limit = limitOf(status);
  const lines = [
    sessionLabel ? `compactd: ${sessionLabel}` : "compactd",
    `${groupDigits(status.tokens)} of ${groupDigits(limit)} tokens used, ${status.percentLeft}% left` +
      (status.autoCompactEnabled ? " before auto-compaction" : ""),
    `counted ${groupDigits(status.exactTokens)} from API usage + ${groupDigits(status.estimatedTokens)} estimated`,
    `window ${groupDigits(status.contextWindow)}, effective ${groupDigits(status.effectiveWindow)}, ` +
      `blocking at ${groupDigits(status.blockingLimit)}`,
  ];
  if (!status.compactionEnabled) {
    lines.push("compaction is disabled");
  } else if (!status.autoCompactEnabled) {
    lines.push("auto-compaction is off");
  }
  if (status.circuitOpen) {
    lines.push("auto-compaction paused after repeated failures");
  }
  if (status.isAtBlockingLimit) {
    lines.push("at the blocking limit: compact before the next request");
  }
  lines.push("", "Click for the token breakdown.");
  return lines.join("\n");
}

const PHASES: Record<StatusNotification["phase"], string> = {
  started: "Starting",
  preCompactHooks: "Running PreCompact hooks",
  summarizing: "Summarizing the conversation",
  keepAlive: "Still summarizing",
  rehydrating: "Restoring recent files and context",
  sessionStartHooks: "Running SessionStart hooks",
  completed: "Done",
  failed: "Failed",
  cancelled: "Cancelled",
};

/** The progress-notification message for a `compact/status` notification. */
export function phaseMessage(note: StatusNotification): string {
  const label = PHASES[note.phase] ?? note.phase;
  const elapsed = `${(note.elapsedMs / 1000).toFixed(0)} s`;
  const detail = note.message ? `: ${note.message}` : "";
  return `${label}${detail} (${elapsed})`;
}

/** The phases after which no more notifications come for that compaction. */
export function isFinalPhase(phase: StatusNotification["phase"]): boolean {
  return phase === "completed" || phase === "failed" || phase === "cancelled";
}

/** One-line outcome of a compaction, for an information message. */
export function compactionOutcome(result: CompactResult): string {
  const pre = result.preCompactTokens;
  const post = result.postCompactTokens;
  const saved = pre > 0 ? Math.round(((pre - post) / pre) * 100) : 0;
  return (
    `Compacted ${groupDigits(pre)} → ${groupDigits(post)} tokens (${saved}% freed) ` +
    `in ${(result.durationMs / 1000).toFixed(1)} s`
  );
}

export interface BreakdownRow {
  /** What the tokens are (a category, or a tool's requests / results, or an attachment kind). */
  label: string;
  /** Which group the row belongs to, for indentation and quick-pick separators. */
  group: "category" | "toolRequest" | "toolResult" | "attachment" | "duplicateRead";
  tokens: number;
  percent: number;
  count?: number;
}

/** The breakdown flattened into rows: categories first, then per tool, attachments, waste. */
export function breakdownRows(bd: BreakdownResult): BreakdownRow[] {
  const rows: BreakdownRow[] = [];
  const push = (group: BreakdownRow["group"], prefix: string, items: BreakdownResult["categories"]): void => {
    for (const c of items) {
      rows.push({ label: prefix + c.name, group, tokens: c.tokens, percent: c.percent, count: c.count });
    }
  };
  for (const c of bd.categories) {
    rows.push({ label: humanize(c.name), group: "category", tokens: c.tokens, percent: c.percent, count: c.count });
  }
  push("toolRequest", "tool use: ", bd.toolRequests);
  push("toolResult", "tool result: ", bd.toolResults);
  push("attachment", "attachment: ", bd.attachments);
  for (const d of bd.duplicateReads) {
    const percent = bd.totalTokens > 0 ? (d.wastedTokens / bd.totalTokens) * 100 : 0;
    rows.push({ label: `re-read: ${d.path}`, group: "duplicateRead", tokens: d.wastedTokens, percent, count: d.reads });
  }
  return rows;
}

/** A category's wire name in words: "localCommandOutput" -> "local command output". */
export function humanize(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase();
}

/** The breakdown as a fixed-width text table (for the output channel). */
export function breakdownTable(bd: BreakdownResult): string {
  const rows = breakdownRows(bd);
  const width = Math.max(8, ...rows.map((r) => r.label.length + (r.group === "category" ? 0 : 2)));
  const line = (label: string, tokens: string, share: string): string =>
    `${label.padEnd(width)}  ${tokens.padStart(12)}  ${share.padStart(7)}`;
  const out = [line("category", "tokens", "share"), "-".repeat(width + 23)];
  for (const r of rows) {
    const indent = r.group === "category" ? "" : "  ";
    out.push(line(indent + r.label, groupDigits(r.tokens), `${r.percent.toFixed(1)}%`));
  }
  out.push("-".repeat(width + 23), line("total", groupDigits(bd.totalTokens), "100.0%"));
  if (bd.duplicateReadTokens > 0) {
    out.push(`duplicate file reads waste ${groupDigits(bd.duplicateReadTokens)} tokens`);
  }
  return out.join("\n");
}
