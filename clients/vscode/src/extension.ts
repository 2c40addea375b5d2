/**
 * VS Code glue for compactd: wires the features to VS Code and to each other. Each feature is a
 * module of its own: the daemon's life (`daemon.ts`), the status bar gauge (`gauge.ts`), the
 * session on display (`sessions.ts`), compaction on demand (`compaction.ts`), the token breakdown
 * (`breakdown.ts`), the context panel (`panel.ts`, drawn by `contextview.ts`), following the
 * workspace's running Claude Code session (`follow.ts`), compacting it into a new Claude Code
 * session and resuming that in a terminal (`resume.ts`), installing compactd into the workspace's Claude Code
 * settings (`install.ts`) and the daemon's own work-done progress
 * (`progress.ts`), with what they share in `ui.ts`. Everything protocol-shaped lives in `core.ts`, everything person-facing in
 * `format.ts`, finding the daemon in `locate.ts` and Claude Code's folders in `transcripts.ts`.
 * Other extensions (the agent itself) get the running client and can choose the session to
 * display through the API returned by `activate`.
 */

import * as vscode from "vscode";

import { Breakdown } from "./breakdown";
import { Compaction } from "./compaction";
import type { CompactdClient } from "./core";
import { Daemon } from "./daemon";
import { Follow } from "./follow";
import { Gauge } from "./gauge";
import { ClaudeCodeInstall } from "./install";
import { ContextPanel } from "./panel";
import { ProgressView } from "./progress";
import { Resume } from "./resume";
import { Sessions } from "./sessions";
import { Ui } from "./ui";

export { RESTART_DEBOUNCE_MS } from "./daemon";

/** What other extensions get from `vscode.extensions.getExtension(...).exports`. */
export interface CompactdApi {
  /** The running client, or undefined while the daemon is down. */
  client(): CompactdClient | undefined;
  /** Show this session in the status bar and make it the target of the commands. */
  setActiveSession(sessionId: string): Promise<void>;
  /** The session shown in the status bar. */
  activeSession(): string | undefined;
  /** The Claude Code transcript followed on display, if any. */
  followedTranscript(): string | undefined;
  /** The context panel's latest document (empty until it was opened). */
  contextHtml(): string;
}

/** The features of one activation. */
interface Features {
  ui: Ui;
  daemon: Daemon;
  gauge: Gauge;
  sessions: Sessions;
  compaction: Compaction;
  breakdown: Breakdown;
  panel: ContextPanel;
  follow: Follow;
  resume: Resume;
}

function create(context: vscode.ExtensionContext): Features {
  const ui = new Ui();
  const gauge: Gauge = new Gauge(ui, () => void ui.withErrors("Compaction", () => compaction.compact(undefined)));
  const daemon = new Daemon(context, ui, () => gauge.render());
  gauge.follow(daemon);
  const progressView = new ProgressView(daemon);
  const sessions = new Sessions(context, ui, daemon, gauge);
  const compaction: Compaction = new Compaction(ui, daemon, sessions, progressView);
  const breakdown = new Breakdown(ui, daemon, sessions);
  const panel = new ContextPanel(ui, daemon, sessions);
  const follow = new Follow(ui, daemon, sessions);
  const resume = new Resume(ui, daemon, sessions, follow);
  compaction.resumeInstead = () => resume.run();
  ui.settled = () => gauge.render();
  return { ui, daemon, gauge, sessions, compaction, breakdown, panel, follow, resume };
}

function register(context: vscode.ExtensionContext, f: Features): void {
  const command = (id: string, what: string, run: () => Promise<unknown>): void => {
    context.subscriptions.push(vscode.commands.registerCommand(id, () => f.ui.withErrors(what, run)));
  };
  command("compactd.compact", "Compaction", () => f.compaction.compact(undefined));
  command("compactd.compactWithInstructions", "Compaction", () => f.compaction.compactWithInstructions());
  command("compactd.showBreakdown", "Token breakdown", () => f.breakdown.show());
  command("compactd.showContext", "The context panel", () => f.panel.show());
  command("compactd.compactAndResume", "Compact and resume", () => f.resume.run());
  command("compactd.selectSession", "Opening the session", () => f.sessions.select());
  command("compactd.refresh", "Refreshing the token status", () => f.sessions.refresh());
  command("compactd.restart", "Starting compactd", () => f.daemon.restart());
  command("compactd.installClaudeCode", "Installing compactd into Claude Code", () => new ClaudeCodeInstall(f.ui).run());
  f.daemon.watchSettings();
  context.subscriptions.push(f.daemon, f.gauge, f.panel, f.follow, f.ui);
}

async function start(f: Features): Promise<void> {
  // In the background: activating the Python extension can take a while, and the daemon may
  // not need it (the setting, PATH).
  void f.daemon
    .watchInterpreter()
    .catch((err: unknown) =>
      f.ui.output.appendLine(`cannot follow the Python extension's interpreter: ${err instanceof Error ? err.message : String(err)}`),
    );
  await f.ui.withErrors("Starting compactd", async () => {
    await f.daemon.ensureClient(false);
    // The workspace's running Claude Code session comes first; else the last window's session.
    if (!(await f.follow.start())) {
      await f.sessions.restore();
    }
  });
}

let active: Features | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<CompactdApi> {
  const features = create(context);
  active = features;
  register(context, features);
  await start(features);
  return {
    client: () => features.daemon.current(),
    setActiveSession: (sessionId) => features.sessions.open(sessionId),
    activeSession: () => features.sessions.active,
    followedTranscript: () => features.follow.transcript,
    contextHtml: () => features.panel.html,
  };
}

export async function deactivate(): Promise<void> {
  await active?.daemon.stop();
  active = undefined;
}
