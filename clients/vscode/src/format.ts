/**
 * What the extension shows a person, as plain functions of protocol results: the status-bar text
 * and tooltip for a token status, the wording of compaction phases, the token breakdown as rows
 * and as a text table, and the one-line outcome of a compaction. Pure (no VS Code, no I/O) so the
 * node test runner checks them directly.
 */

import type { BreakdownResult, CompactResult, SessionInfo, StatusNotification, TokenStatus } from "./core";
import { sessionIdFor, type Transcript } from "./transcripts";

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

/** The total in its parts: what every request carries besides the messages, the messages... */
export function partsLine(status: TokenStatus): string {
  let out = `system prompt and tools ${groupDigits(status.fixedPrefixTokens ?? 0)} + messages ${groupDigits(status.messageTokens ?? 0)}`;
  if (status.attachmentTokens) out += ` + attachments ${groupDigits(status.attachmentTokens)}`;
  if (status.clearedTokens) out += ` - cleared ${groupDigits(status.clearedTokens)}`;
  return out;
}

export function statusTooltip(status: TokenStatus, sessionLabel?: string): string {
  const limit = limitOf(status);
  const lines = [
    sessionLabel ? `compactd: ${sessionLabel}` : "compactd",
    `${groupDigits(status.tokens)} of ${groupDigits(limit)} tokens used, ${status.percentLeft}% left` +
      (status.autoCompactEnabled ? " before auto-compaction" : ""),
    partsLine(status),
    `counted ${groupDigits(status.exactTokens)} from API usage + ${groupDigits(status.estimatedTokens)} estimated`,
    `window ${groupDigits(status.contextWindow)}, effective ${groupDigits(status.effectiveWindow)}, ` +
      `blocking at ${groupDigits(status.blockingLimit)}`,
  ];
  if (status.autoCompactEnabled && status.autoCompactSource === "tokens") {
    lines.push(`auto-compact at ${groupDigits(status.autoCompactThreshold)}: the absolute level (autoCompactTokens)`);
  } else if (status.autoCompactEnabled && status.autoCompactSource === "env") {
    lines.push(`auto-compact at ${groupDigits(status.autoCompactThreshold)}: set by the environment`);
  }
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
  const prep = status.preparation;
  if (prep?.state === "ready" && prep.refreshing) {
    lines.push(
      `a summary is ready (${groupDigits(prep.entriesCovered)} entries) and a fresher one is being written in the background`,
    );
  } else if (prep?.state === "ready") {
    lines.push(`a summary is ready (${groupDigits(prep.entriesCovered)} entries): the next compaction applies it at once`);
  } else if (prep?.state === "preparing") {
    lines.push(`a summary of ${groupDigits(prep.entriesCovered)} entries is being prepared in the background`);
  }
  lines.push("", "Click for the context panel.");
  return lines.join("\n");
}

/** 12 -> "12 ms", 3400 -> "3.4 s", 125000 -> "2 min 5 s": milliseconds under a second. */
export function formatDuration(ms: number): string {
  if (ms < 1_000) {
    return `${Math.max(0, Math.round(ms))} ms`;
  }
  if (ms < 60_000) {
    return `${(ms / 1_000).toFixed(1).replace(/\.0$/, "")} s`;
  }
  const seconds = Math.round(ms / 1_000);
  return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

/** The threshold warnings worth interrupting a person for, by the highest level reached. */
const THRESHOLD_WARNINGS = {
  blocking: "The conversation has reached the blocking limit: the next request will not fit.",
  error: "The conversation is close to the auto-compaction threshold.",
} as const;

/** The warning a token status calls for, or undefined when none (below the error level). */
export function thresholdWarning(status: TokenStatus): string | undefined {
  if (status.isAtBlockingLimit) {
    return THRESHOLD_WARNINGS.blocking;
  }
  return status.isAboveErrorThreshold ? THRESHOLD_WARNINGS.error : undefined;
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
  // A background preparation's phases (`background: true`): shown quietly, in the tooltip.
  preparing: "Preparing a summary in the background",
  prepared: "Summary ready",
};

/**
 * The progress-notification text for a `compact/status` notification: the phase in words, and the
 * daemon's message when it adds something (a retry, the offline fallback). A keep-alive has no
 * text of its own: it only says that the summarizing phase goes on.
 */
export function phaseMessage(note: StatusNotification): string | undefined {
  if (note.phase === "keepAlive") {
    return undefined;
  }
  const label = PHASES[note.phase] ?? note.phase;
  return note.message ? `${label}: ${note.message}` : label;
}

/** The text to write for `note`, or undefined when it would repeat what `shown` already says. */
export function progressUpdate(note: StatusNotification, shown: string | undefined): string | undefined {
  const text = isFinalPhase(note.phase) ? undefined : phaseMessage(note);
  return text === shown ? undefined : text;
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
    `in ${formatDuration(result.durationMs)}`
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

/** A count the daemon reported, or undefined for one it did not (older daemons sent -1). */
function known(n: number | null | undefined): number | undefined {
  return typeof n === "number" && n >= 0 ? n : undefined;
}

/** What the session picker says about a session: its size when known, never a placeholder. */
export function sessionDescription(info: SessionInfo): string {
  const tokens = known(info.tokens);
  const entries = known(info.entryCount);
  if (tokens === undefined && entries === undefined) {
    return "stored, not loaded";
  }
  const parts = [];
  if (tokens !== undefined) {
    parts.push(`${groupDigits(tokens)} tokens`);
  }
  if (entries !== undefined) {
    parts.push(`${groupDigits(entries)} entr${entries === 1 ? "y" : "ies"}`);
  }
  if (info.following) {
    parts.push("following");
  }
  return parts.join(" · ");
}

export interface SessionRow {
  label: string;
  description: string;
  detail?: string;
  /** The session to open. */
  sessionId: string;
  /** The Claude Code transcript to import, when the daemon does not have the session yet. */
  transcript?: string;
  group: "daemon" | "transcript";
}

/**
 * One row per session for the picker: the daemon's sessions, then the workspace's transcripts that
 * the daemon does not have. A transcript is imported under its Claude Code session id, so one the
 * daemon already has is the same session: it is listed once, with the daemon's figures.
 */
export function sessionRows(sessions: readonly SessionInfo[], transcripts: readonly Transcript[]): SessionRow[] {
  const bySession = new Map(transcripts.map((t) => [sessionIdFor(t.file), t]));
  const rows: SessionRow[] = sessions.map((s) => {
    const transcript = bySession.get(s.sessionId);
    return {
      label: s.sessionId,
      description: sessionDescription(s),
      detail: transcript ? `Claude Code transcript ${transcript.file}` : s.cwd,
      sessionId: s.sessionId,
      group: "daemon",
    };
  });
  const listed = new Set(sessions.map((s) => s.sessionId));
  for (const t of transcripts) {
    const sessionId = sessionIdFor(t.file);
    if (!listed.has(sessionId)) {
      listed.add(sessionId);
      rows.push({
        label: sessionId,
        description: `not imported · modified ${t.modified.toLocaleString()}`,
        detail: t.file,
        sessionId,
        transcript: t.file,
        group: "transcript",
      });
    }
  }
  return rows;
}

/**
 * Why a compaction cannot run on a session the daemon follows (docs/follow.md#writes), and what
 * to do instead: compactd's copy only mirrors the file Claude Code writes, so a compaction there
 * would never reach Claude Code.
 */
export function followedRefusal(sessionId: string): string {
  return (
    `Session ${sessionId} follows Claude Code's transcript: compacting compactd's copy would never ` +
    `reach Claude Code. "Compact and resume in Claude Code" writes the compaction as a new Claude ` +
    `Code session and resumes it in a terminal.`
  );
}

/** Who holds a session (a `sessionLocked` error's data or a read-only open's `heldBy`), in words. */
export function holderText(holder: { pid?: unknown; host?: unknown; since?: unknown } | null | undefined): string {
  const pid = typeof holder?.pid === "number" ? ` (pid ${holder.pid}${typeof holder.host === "string" && holder.host ? ` on ${holder.host}` : ""})` : "";
  return `another compactd${pid}, probably another VS Code window`;
}

/** The quiet notice for a session shown read-only because another daemon owns it. */
export function readOnlyNotice(sessionId: string, holder: { pid?: unknown; host?: unknown } | null | undefined): string {
  return `Session ${sessionId} is open in ${holderText(holder)}; it is shown read-only here. Close that window (or pick another session there) and select it again here to work on it.`;
}

/**
 * What a person can do about a write the daemon refused, by its `data.code`; undefined for any
 * other error. `data` is the error's data (a `sessionLocked` names the holder).
 */
export function writeRefusal(code: string, data: Record<string, unknown>): string | undefined {
  const sessionId = typeof data["sessionId"] === "string" ? data["sessionId"] : "this session";
  switch (code) {
    case "sessionFollowed":
      return followedRefusal(sessionId);
    case "sessionReadOnly":
      return `Session ${sessionId} is shown read-only in this window because another compactd owns it. Work on it in that window, or close it there and select it again here.`;
    case "sessionLocked":
      return `Session ${sessionId} is open in ${holderText({ pid: data["holderPid"], host: data["holderHost"] })}. Work on it there, or close it there and select it again here.`;
  }
  return undefined;
}

/**
 * The compactd session ids under which this window may follow the Claude Code session `base`, in
 * the order tried: its own id, then `base-2`, `base-3`, ... (another window's daemon owns the
 * ones before). Always the same order, so a window that reloads finds its own copy again.
 */
export function followIds(base: string, count: number): string[] {
  return [base, ...Array.from({ length: count - 1 }, (_, i) => `${base}-${i + 2}`)];
}
