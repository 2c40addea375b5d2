/**
 * The context panel's picture, as plain functions of protocol results: what the next request
 * carries as one horizontal bar of its parts (`tokens/breakdown`: system prompt and tools,
 * messages, tool results by tool, attachments, and what microcompact cleared), the session's size
 * over time with each compaction as a drop (`tokens/history` plus the current `tokens/status`),
 * and what `compact/auto` would do next (`compact/preview`). The output is one HTML document with
 * inline SVG and no script: colours come from VS Code's theme variables (light, dark and high
 * contrast alike), the only style block carries the nonce the Content-Security-Policy allows, and
 * nothing is loaded from anywhere. Pure (no VS Code, no I/O) so node tests check it directly;
 * `panel.ts` puts it in a webview.
 */

import type { BreakdownResult, HistoryResult, PreviewResult, TokenStatus } from "./core";
import { groupDigits, limitOf, shortTokens } from "./format";

/** What the panel shows; any part the daemon could not give is left out. */
export interface ContextData {
  sessionId: string;
  status: TokenStatus;
  breakdown?: BreakdownResult;
  history?: HistoryResult;
  preview?: PreviewResult;
  /** Whether the daemon follows the session's Claude Code transcript as it grows. */
  following?: boolean;
}

/** One segment of the bar. */
export interface BarPart {
  /** Stable id (a test and the legend use it): `prefix`, `messages`, `tool:<name>`, `attachments`, `cleared`. */
  id: string;
  label: string;
  tokens: number;
  /** The theme colour class (`c0`..`c6`), and an opacity to tell tools of one colour apart. */
  colour: string;
  opacity: number;
}

// Breakdown categories (compactd/core/tokens/categories.py) that are the conversation itself.
const MESSAGE_CATEGORIES = new Set(["human", "assistant", "localCommandOutput", "meta", "toolRequests", "unknown"]);
const PREFIX = "fixedPrefix";
const TOOL_RESULTS = "toolResults";
const ATTACHMENTS = "attachments";
const CLEARED = "clearedByMicrocompact";

/** Tool-result segments beyond this many are one "other tool results" segment: a bar stays legible. */
export const MAX_TOOL_SEGMENTS = 6;

/** The parts of the next request, in the order the bar draws them; empty parts are left out. */
export function barParts(bd: BreakdownResult): BarPart[] {
  const tokensOf = (name: string): number => bd.categories.find((c) => c.name === name)?.tokens ?? 0;
  const parts: BarPart[] = [];
  const push = (part: BarPart): void => {
    if (part.tokens > 0) parts.push(part);
  };
  push({ id: "prefix", label: "system prompt and tools", tokens: tokensOf(PREFIX), colour: "c0", opacity: 1 });
  const messages = bd.categories.filter((c) => MESSAGE_CATEGORIES.has(c.name)).reduce((sum, c) => sum + c.tokens, 0);
  push({ id: "messages", label: "messages", tokens: messages, colour: "c1", opacity: 1 });
  const tools = [...bd.toolResults].filter((t) => t.tokens > 0).sort((a, b) => b.tokens - a.tokens || a.name.localeCompare(b.name));
  const shown = tools.length > MAX_TOOL_SEGMENTS ? tools.slice(0, MAX_TOOL_SEGMENTS - 1) : tools;
  shown.forEach((t, i) => {
    push({ id: `tool:${t.name}`, label: `${t.name} results`, tokens: t.tokens, colour: "c2", opacity: 1 - (i / MAX_TOOL_SEGMENTS) * 0.7 });
  });
  const rest = tools.slice(shown.length).reduce((sum, t) => sum + t.tokens, 0);
  // Results the per-tool list does not name (it can trail the category): one segment with the rest.
  const unnamed = Math.max(0, tokensOf(TOOL_RESULTS) - tools.reduce((sum, t) => sum + t.tokens, 0));
  push({ id: "tool:*", label: "other tool results", tokens: rest + unnamed, colour: "c2", opacity: 0.25 });
  push({ id: "attachments", label: "attachments", tokens: tokensOf(ATTACHMENTS), colour: "c3", opacity: 1 });
  // The breakdown lists what microcompact cleared as a negative row: already out of the total.
  push({ id: "cleared", label: "cleared by microcompact (not sent)", tokens: Math.abs(tokensOf(CLEARED)), colour: "c4", opacity: 1 });
  return parts;
}

/** One corner of the history line: a response's size, or the two ends of a compaction's drop. */
export interface HistoryStep {
  x: number;
  tokens: number;
  kind: "response" | "compactionBefore" | "compactionAfter" | "now";
  label: string;
}

/**
 * The history as the path the chart draws, in transcript order: each response's size, each
 * compaction as its size before then after at one position (a vertical drop), and the size now
 * (`tokens/status`, which adds the estimate of lines after the latest response) at the end.
 */
export function historySteps(history: HistoryResult, status: TokenStatus): HistoryStep[] {
  type Event = { x: number; order: number; steps: HistoryStep[] };
  const events: Event[] = [];
  for (const p of history.points) {
    const when = p.timestamp ? ` at ${p.timestamp.replace("T", " ").replace(/\.\d+Z$|Z$/, "")}` : "";
    events.push({ x: p.entryIndex, order: 1, steps: [{ x: p.entryIndex, tokens: p.tokens, kind: "response", label: `${groupDigits(p.tokens)} tokens${when}` }] });
  }
  for (const c of history.compactions) {
    if (c.undone) continue;
    const label = `${c.trigger} ${c.mechanism} compaction: ${groupDigits(c.preTokens)} → ${groupDigits(c.postTokens)} tokens`;
    events.push({
      x: c.entryIndex,
      order: 0,
      steps: [
        { x: c.entryIndex, tokens: c.preTokens, kind: "compactionBefore", label },
        { x: c.entryIndex, tokens: c.postTokens, kind: "compactionAfter", label },
      ],
    });
  }
  events.sort((a, b) => a.x - b.x || a.order - b.order);
  const steps = events.flatMap((e) => e.steps);
  steps.push({ x: Math.max(history.entryCount, 1), tokens: status.tokens, kind: "now", label: `now: ${groupDigits(status.tokens)} tokens` });
  return steps;
}

/** What `compact/auto` would do next, in a sentence. */
export function previewSentence(preview: PreviewResult): string {
  const why = preview.reason ? ` (${preview.reason.replace(/\.$/, "")})` : "";
  if (!preview.wouldCompact || preview.mechanism === "none") {
    return `Nothing yet${why}.`;
  }
  const what: Record<PreviewResult["mechanism"], string> = {
    micro: "clear old tool results (microcompact)",
    sessionMemory: "replace the older messages with the session memory",
    full: "summarize the conversation",
    partial: "summarize part of the conversation",
    none: "nothing",
  };
  return `It would ${what[preview.mechanism]}: ${groupDigits(preview.preTokens)} → about ${groupDigits(preview.estimatedPostTokens)} tokens${why}.`;
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]!);
}

// The chart's drawing area (SVG user units; the SVG scales to the panel's width).
const W = 720;
const BAR_H = 28;
const CHART_H = 220;
const PAD_L = 56;
const PAD_R = 12;
const PAD_T = 12;
const PAD_B = 24;

function round(n: number): string {
  return (Math.round(n * 10) / 10).toString();
}

function barSvg(parts: BarPart[], status: TokenStatus): string {
  // The bar's full length is the context window; the free part is what is left of it.
  const scale = Math.max(status.contextWindow, status.tokens, 1);
  let x = 0;
  const rects: string[] = [];
  for (const part of parts) {
    const width = (part.tokens / scale) * W;
    const cls = part.id === "cleared" ? `${part.colour} cleared` : part.colour;
    rects.push(
      `<rect class="${cls}" data-part="${escapeHtml(part.id)}" x="${round(x)}" y="0" width="${round(width)}" height="${BAR_H}" fill-opacity="${part.opacity.toFixed(2)}"><title>${escapeHtml(part.label)}: ${groupDigits(part.tokens)} tokens</title></rect>`,
    );
    x += width;
  }
  const mark = (tokens: number, cls: string, title: string): string => {
    const mx = round((tokens / scale) * W);
    return `<line class="${cls}" x1="${mx}" x2="${mx}" y1="-4" y2="${BAR_H + 4}"><title>${escapeHtml(title)}</title></line>`;
  };
  return (
    `<svg class="bar" role="img" aria-label="what the next request carries" viewBox="0 -4 ${W} ${BAR_H + 8}" preserveAspectRatio="none">` +
    `<rect class="free" x="0" y="0" width="${W}" height="${BAR_H}"><title>context window: ${groupDigits(status.contextWindow)} tokens</title></rect>` +
    rects.join("") +
    (status.autoCompactEnabled ? mark(status.autoCompactThreshold, "threshold", `auto-compact at ${groupDigits(status.autoCompactThreshold)} tokens`) : "") +
    mark(status.effectiveWindow, "limit", `effective window: ${groupDigits(status.effectiveWindow)} tokens`) +
    `</svg>`
  );
}

function legendHtml(parts: BarPart[], total: number): string {
  const rows = parts.map((p) => {
    const pct = total > 0 && p.id !== "cleared" ? ` · ${((p.tokens / total) * 100).toFixed(1)}%` : "";
    return (
      `<li data-part="${escapeHtml(p.id)}"><svg class="swatch" viewBox="0 0 10 10"><rect class="${p.colour}${p.id === "cleared" ? " cleared" : ""}" width="10" height="10" fill-opacity="${p.opacity.toFixed(2)}"/></svg>` +
      `<span class="name">${escapeHtml(p.label)}</span> <span class="num">${groupDigits(p.tokens)}${pct}</span></li>`
    );
  });
  return `<ul class="legend">${rows.join("")}</ul>`;
}

function historySvg(steps: HistoryStep[], history: HistoryResult, status: TokenStatus): string {
  const maxX = Math.max(history.entryCount, 1);
  const top = Math.max(status.autoCompactEnabled ? status.autoCompactThreshold : 0, ...steps.map((s) => s.tokens), 1) * 1.1;
  const px = (x: number): number => PAD_L + (x / maxX) * (W - PAD_L - PAD_R);
  const py = (t: number): number => PAD_T + (1 - t / top) * (CHART_H - PAD_T - PAD_B);
  const path = steps.map((s, i) => `${i === 0 ? "M" : "L"}${round(px(s.x))},${round(py(s.tokens))}`).join(" ");
  const dots = steps
    .map((s) => {
      const cls = s.kind === "response" ? "dot" : s.kind === "now" ? "dot now" : s.kind === "compactionAfter" ? "drop" : "";
      if (!cls) return "";
      const r = s.kind === "compactionAfter" ? 5 : s.kind === "now" ? 4 : 2.5;
      return `<circle class="${cls}" data-kind="${s.kind}" cx="${round(px(s.x))}" cy="${round(py(s.tokens))}" r="${r}"><title>${escapeHtml(s.label)}</title></circle>`;
    })
    .join("");
  const ticks = [0, 0.25, 0.5, 0.75, 1]
    .map((f) => {
      const t = top * f;
      const y = round(py(t));
      return `<line class="grid" x1="${PAD_L}" x2="${W - PAD_R}" y1="${y}" y2="${y}"/><text class="axis" x="${PAD_L - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${shortTokens(Math.round(t))}</text>`;
    })
    .join("");
  const threshold = status.autoCompactEnabled
    ? `<line class="threshold" x1="${PAD_L}" x2="${W - PAD_R}" y1="${round(py(status.autoCompactThreshold))}" y2="${round(py(status.autoCompactThreshold))}"><title>auto-compact at ${groupDigits(status.autoCompactThreshold)} tokens</title></line>` +
      `<text class="axis" x="${W - PAD_R}" y="${round(py(status.autoCompactThreshold) - 4)}" text-anchor="end">auto-compact</text>`
    : "";
  return (
    `<svg class="history" role="img" aria-label="tokens over time" viewBox="0 0 ${W} ${CHART_H}">` +
    ticks +
    threshold +
    `<path class="line" d="${path}"/>` +
    dots +
    `<text class="axis" x="${PAD_L}" y="${CHART_H - 6}">first line</text>` +
    `<text class="axis" x="${W - PAD_R}" y="${CHART_H - 6}" text-anchor="end">line ${groupDigits(history.entryCount)} (now)</text>` +
    `</svg>`
  );
}

const STYLE = `
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); background: var(--vscode-editor-background); padding: 0 16px 16px; }
h1 { font-size: 1.3em; font-weight: 600; margin: 12px 0 2px; }
h2 { font-size: 1.05em; font-weight: 600; margin: 20px 0 6px; }
.sub { color: var(--vscode-descriptionForeground); margin: 0; }
svg.bar { width: 100%; height: 36px; display: block; }
svg.history { width: 100%; max-width: 960px; display: block; }
.c0 { fill: var(--vscode-charts-purple); } .c1 { fill: var(--vscode-charts-blue); } .c2 { fill: var(--vscode-charts-orange); }
.c3 { fill: var(--vscode-charts-green); } .c4 { fill: var(--vscode-charts-red); }
.cleared { fill-opacity: 0.35; }
.free { fill: var(--vscode-editorWidget-background, var(--vscode-editor-background)); stroke: var(--vscode-charts-lines); stroke-width: 1; }
.threshold { stroke: var(--vscode-charts-yellow); stroke-width: 2; stroke-dasharray: 5 3; }
.limit { stroke: var(--vscode-charts-red); stroke-width: 2; }
.grid { stroke: var(--vscode-charts-lines); stroke-opacity: 0.35; stroke-width: 1; }
.axis { fill: var(--vscode-descriptionForeground); font-size: 11px; }
.line { fill: none; stroke: var(--vscode-charts-blue); stroke-width: 2; stroke-linejoin: round; }
.dot { fill: var(--vscode-charts-blue); } .dot.now { fill: var(--vscode-charts-foreground, var(--vscode-foreground)); }
.drop { fill: var(--vscode-charts-red); stroke: var(--vscode-editor-background); stroke-width: 1.5; }
ul.legend { list-style: none; padding: 0; margin: 8px 0 0; display: flex; flex-wrap: wrap; gap: 4px 18px; }
ul.legend li { display: flex; align-items: center; gap: 6px; }
svg.swatch { width: 10px; height: 10px; }
.num { color: var(--vscode-descriptionForeground); font-variant-numeric: tabular-nums; }
.next { padding: 8px 12px; border-left: 3px solid var(--vscode-charts-yellow); background: var(--vscode-textBlockQuote-background); }
.none { color: var(--vscode-descriptionForeground); font-style: italic; }
`;

/** The panel's whole document. `cspSource` is the webview's own origin; `nonce` unlocks the one style block. */
export function contextHtml(data: ContextData, nonce: string, cspSource: string): string {
  const { status } = data;
  const csp = `default-src 'none'; img-src ${cspSource}; style-src 'nonce-${nonce}'; font-src ${cspSource};`;
  const sections: string[] = [];
  const follows = data.following ? " · following the Claude Code transcript as it grows" : "";
  sections.push(
    // The same figures as the gauge and its tooltip: percentLeft is measured against limitOf.
    `<h1>${groupDigits(status.tokens)} of ${groupDigits(limitOf(status))} tokens · ${status.percentLeft}% left` +
      `${status.autoCompactEnabled ? " before auto-compaction" : ""}</h1>` +
      `<p class="sub">session ${escapeHtml(data.sessionId)}${follows}</p>`,
  );
  sections.push(`<h2>What the next request carries</h2>`);
  if (data.breakdown) {
    const parts = barParts(data.breakdown);
    sections.push(barSvg(parts, status) + legendHtml(parts, data.breakdown.totalTokens));
  } else {
    sections.push(`<p class="none">The breakdown is not available.</p>`);
  }
  sections.push(`<h2>Tokens over time</h2>`);
  if (data.history && data.history.points.length + data.history.compactions.length > 0) {
    const steps = historySteps(data.history, status);
    const drops = data.history.compactions.filter((c) => !c.undone).length;
    sections.push(
      historySvg(steps, data.history, status) +
        `<p class="sub">${data.history.points.length} response${data.history.points.length === 1 ? "" : "s"} · ${drops} compaction${drops === 1 ? "" : "s"} (red: the size after each)</p>`,
    );
  } else {
    sections.push(`<p class="none">No response with usage yet.</p>`);
  }
  sections.push(`<h2>What compact/auto would do next</h2>`);
  sections.push(data.preview ? `<p class="next">${escapeHtml(previewSentence(data.preview))}</p>` : `<p class="none">No preview available.</p>`);
  return (
    `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">` +
    `<meta http-equiv="Content-Security-Policy" content="${csp}">` +
    `<meta name="viewport" content="width=device-width, initial-scale=1">` +
    `<title>compactd context</title><style nonce="${nonce}">${STYLE}</style></head>` +
    `<body>${sections.join("\n")}</body></html>`
  );
}
