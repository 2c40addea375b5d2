/**
 * VS Code glue for compactd: starts the daemon through the client core, shows how much of the
 * context window the active session has left in the status bar, runs compactions behind a
 * cancellable progress notification, and shows the token breakdown. Everything protocol-shaped
 * lives in `core.ts` and everything person-facing in `format.ts`; this module only wires them to
 * VS Code. Other extensions (the agent itself) get the running client and can choose the
 * session to display through the API returned by `activate`.
 */

import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";

import {
  CompactdClient,
  CompactdError,
  DEFAULT_SERVER_COMMAND,
  type InitializationOptions,
  type StatusNotification,
  type TokenStatus,
} from "./core";
import {
  breakdownRows,
  breakdownTable,
  compactionOutcome,
  groupDigits,
  isFinalPhase,
  levelOf,
  phaseMessage,
  statusBarText,
  statusTooltip,
} from "./format";
import { claudeProjectDir } from "./transcripts";

/** What other extensions get from `vscode.extensions.getExtension(...).exports`. */
export interface CompactdApi {
  /** The running client, or undefined while the daemon is down. */
  client(): CompactdClient | undefined;
  /** Show this session in the status bar and make it the target of the commands. */
  setActiveSession(sessionId: string): Promise<void>;
  /** The session shown in the status bar. */
  activeSession(): string | undefined;
}

const DEFAULT_MODEL = "claude-sonnet-4-5";
const STATUS_ICON = "$(fold)";

/** Threshold levels worth interrupting a person for, with what to tell them. */
const THRESHOLD_WARNINGS: Partial<Record<string, string>> = {
  error: "The conversation is close to the auto-compaction threshold.",
  blocking: "The conversation has reached the blocking limit: the next request will not fit.",
};

class Controller implements vscode.Disposable {
  private client: CompactdClient | undefined;
  private starting: Promise<CompactdClient> | undefined;
  private sessionId: string | undefined;
  private lastStatus: TokenStatus | undefined;
  private readonly item: vscode.StatusBarItem;
  private readonly output: vscode.OutputChannel;
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel("compactd");
    this.item = vscode.window.createStatusBarItem("compactd.context", vscode.StatusBarAlignment.Right, 100);
    this.item.name = "compactd context";
    this.render();
    this.item.show();
  }

  // -- daemon ------------------------------------------------------------------------------------

  private config(): vscode.WorkspaceConfiguration {
    return vscode.workspace.getConfiguration("compactd");
  }

  private workspaceDir(): string {
    return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? os.homedir();
  }

  /** The running client; starts the daemon on first use. */
  async ensureClient(): Promise<CompactdClient> {
    if (this.client?.running) {
      return this.client;
    }
    this.starting ??= this.startClient().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async startClient(): Promise<CompactdClient> {
    const config = this.config();
    const command = config.get<string[]>("serverCommand") ?? [...DEFAULT_SERVER_COMMAND];
    const dataDir = config.get<string>("dataDir") || undefined;
    const client = new CompactdClient({
      command,
      dataDir,
      cwd: this.workspaceDir(),
      onStderr: (text) => this.output.append(text),
    });
    this.output.appendLine(`starting ${command.join(" ")}${dataDir ? ` --data-dir ${dataDir}` : ""}`);
    await client.start();
    const options: InitializationOptions = {
      workspaceRoots: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath),
    };
    const summarizer = config.get<InitializationOptions["summarizer"]>("summarizer");
    if (summarizer && Object.keys(summarizer).length > 0) {
      options.summarizer = summarizer;
    }
    const keepAlive = config.get<number | null>("keepAliveIntervalMs");
    if (keepAlive) {
      options.keepAliveIntervalMs = keepAlive;
    }
    const env = config.get<Record<string, string>>("env");
    if (env && Object.keys(env).length > 0) {
      options.env = env;
    }
    try {
      const server = await client.initialize(options);
      this.output.appendLine(`connected to ${server.name} ${server.version} (protocol ${server.protocolVersion})`);
    } catch (err) {
      await client.dispose(1_000);
      throw err;
    }
    client.onTokens(({ sessionId, status }) => {
      if (sessionId === this.sessionId) {
        this.lastStatus = status;
        this.render();
      }
    });
    client.onThreshold((note) => {
      const warning = THRESHOLD_WARNINGS[note.level];
      if (note.sessionId === this.sessionId && warning) {
        void vscode.window.showWarningMessage(warning, "Compact now").then((choice) => {
          if (choice) {
            void this.withErrors("Compaction", () => this.compact(undefined));
          }
        });
      }
    });
    client.onMemoryChanged((note) => this.output.appendLine(`memory file ${note.change}: ${note.path}`));
    client.onCacheBreak((note) => this.output.appendLine(`prompt cache break (${note.querySource}): ${note.explanation}`));
    client.onExit((info) => {
      if (this.client === client) {
        this.client = undefined;
        this.render();
      }
      if (!info.expected) {
        this.output.appendLine(`compactd exited unexpectedly (code ${info.code}, signal ${info.signal})`);
        void vscode.window.showErrorMessage("The compactd daemon stopped.", "Restart", "Show log").then((choice) => {
          if (choice === "Restart") {
            void this.restart();
          } else if (choice === "Show log") {
            this.output.show();
          }
        });
      }
    });
    this.client = client;
    if (this.sessionId) {
      // A restarted daemon restores sessions from its transcripts; re-open the one on display.
      await this.openSession(this.sessionId).catch((err: unknown) => this.reportError("Reopening the session", err));
    }
    return client;
  }

  async restart(): Promise<void> {
    const old = this.client;
    this.client = undefined;
    await old?.dispose();
    await this.withErrors("Starting compactd", () => this.ensureClient());
  }

  // -- sessions ----------------------------------------------------------------------------------

  async setActiveSession(sessionId: string): Promise<void> {
    await this.openSession(sessionId);
  }

  private async openSession(sessionId: string, transcriptPath?: string): Promise<void> {
    const client = await this.ensureClient();
    const config = this.config();
    const contextWindow = config.get<number | null>("contextWindow") || undefined;
    const opened = await client.openSession({
      sessionId,
      cwd: this.workspaceDir(),
      model: config.get<string>("model") || DEFAULT_MODEL,
      ...(contextWindow ? { contextWindow } : {}),
      ...(transcriptPath ? { transcriptPath } : {}),
    });
    this.sessionId = opened.sessionId;
    this.lastStatus = opened.status;
    this.render();
  }

  /** Quick pick: the daemon's sessions, this workspace's Claude Code transcripts, or a file. */
  async selectSession(): Promise<void> {
    const client = await this.ensureClient();
    type Pick = vscode.QuickPickItem & { sessionId?: string; transcript?: string; browse?: boolean };
    const items: Pick[] = [];
    const listed = await client.listSessions();
    if (listed.sessions.length > 0) {
      items.push({ label: "compactd sessions", kind: vscode.QuickPickItemKind.Separator });
      for (const s of listed.sessions) {
        items.push({
          label: s.sessionId,
          description: `${groupDigits(s.tokens)} tokens · ${s.entryCount} entries`,
          detail: s.cwd,
          sessionId: s.sessionId,
        });
      }
    }
    const transcripts = await recentTranscripts(claudeProjectDir(os.homedir(), this.workspaceDir()));
    if (transcripts.length > 0) {
      items.push({ label: "Claude Code transcripts of this workspace", kind: vscode.QuickPickItemKind.Separator });
      for (const t of transcripts) {
        items.push({ label: path.basename(t.file), description: t.modified.toLocaleString(), transcript: t.file });
      }
    }
    items.push({ label: "$(file) Import a transcript file…", browse: true });
    const choice = await vscode.window.showQuickPick(items, { placeHolder: "Session to show and compact" });
    if (!choice) {
      return;
    }
    let transcript = choice.transcript;
    if (choice.browse) {
      const files = await vscode.window.showOpenDialog({
        canSelectMany: false,
        filters: { "Claude Code transcript": ["jsonl"] },
      });
      transcript = files?.[0]?.fsPath;
      if (!transcript) {
        return;
      }
    }
    if (transcript) {
      // Claude Code names transcripts by session id: reusing it re-opens an earlier import.
      await this.openSession(sessionIdFor(transcript), transcript);
    } else if (choice.sessionId) {
      await this.openSession(choice.sessionId);
    }
  }

  private async activeSessionOrAsk(): Promise<string | undefined> {
    if (!this.sessionId) {
      await this.selectSession();
    }
    return this.sessionId;
  }

  activeSession(): string | undefined {
    return this.sessionId;
  }

  currentClient(): CompactdClient | undefined {
    return this.client?.running ? this.client : undefined;
  }

  // -- commands ----------------------------------------------------------------------------------

  async compactWithInstructions(): Promise<void> {
    const instructions = await vscode.window.showInputBox({
      title: "Compact with instructions",
      prompt: "What should the summary focus on or keep?",
      placeHolder: "e.g. keep the exact error messages and the list of files changed",
      ignoreFocusOut: true,
    });
    if (instructions === undefined) {
      return;
    }
    await this.compact(instructions.trim() || undefined);
  }

  async compact(instructions: string | undefined): Promise<void> {
    const sessionId = await this.activeSessionOrAsk();
    if (!sessionId) {
      return;
    }
    const client = await this.ensureClient();
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "compactd: compacting", cancellable: true },
      async (progress, token) => {
        let compactionId: string | undefined;
        const listener = client.onStatus((note: StatusNotification) => {
          // Only this session's manual compaction; an auto one may run for another session.
          if (note.sessionId !== sessionId || (compactionId !== undefined && note.compactionId !== compactionId)) {
            return;
          }
          compactionId ??= note.compactionId;
          if (!isFinalPhase(note.phase)) {
            progress.report({ message: phaseMessage(note) });
          }
        });
        try {
          const result = await client.compactFull(sessionId, instructions, token);
          void vscode.window.showInformationMessage(compactionOutcome(result));
        } catch (err) {
          if (err instanceof CompactdError && err.cancelled) {
            void vscode.window.showInformationMessage("Compaction cancelled; the conversation is unchanged.");
          } else {
            this.reportError("Compaction", err);
          }
        } finally {
          listener.dispose();
        }
      },
    );
  }

  async showBreakdown(): Promise<void> {
    const sessionId = await this.activeSessionOrAsk();
    if (!sessionId) {
      return;
    }
    const client = await this.ensureClient();
    const bd = await client.breakdown(sessionId);
    this.output.appendLine(`\ntoken breakdown of session ${sessionId}`);
    this.output.appendLine(breakdownTable(bd));
    const items: vscode.QuickPickItem[] = breakdownRows(bd).map((r) => ({
      label: r.group === "category" ? r.label : `$(indent) ${r.label}`,
      description: `${groupDigits(r.tokens)} tokens · ${r.percent.toFixed(1)}%`,
      detail: r.count !== undefined ? `${r.count} item${r.count === 1 ? "" : "s"}` : undefined,
    }));
    items.push({ label: "$(output) Show as a table", alwaysShow: true });
    const choice = await vscode.window.showQuickPick(items, {
      title: `${groupDigits(bd.totalTokens)} tokens in context`,
      matchOnDescription: true,
    });
    if (choice?.label.endsWith("Show as a table")) {
      this.output.show(true);
    }
  }

  async refresh(): Promise<void> {
    if (this.sessionId && this.client?.running) {
      await this.client.status(this.sessionId);
    }
  }

  // -- display -----------------------------------------------------------------------------------

  private render(): void {
    const item = this.item;
    if (!this.client?.running && !this.starting) {
      item.text = `${STATUS_ICON} compactd: stopped`;
      item.tooltip = "The compactd daemon is not running. Click to start it.";
      item.command = "compactd.restart";
      item.backgroundColor = undefined;
      return;
    }
    if (!this.sessionId || !this.lastStatus) {
      item.text = `${STATUS_ICON} compactd`;
      item.tooltip = "No session selected. Click to choose one.";
      item.command = "compactd.selectSession";
      item.backgroundColor = undefined;
      return;
    }
    const status = this.lastStatus;
    item.text = `${STATUS_ICON} ${statusBarText(status)}`;
    item.tooltip = statusTooltip(status, this.sessionId);
    item.command = "compactd.showBreakdown";
    const level = levelOf(status);
    item.backgroundColor =
      level === "ok" ? undefined : new vscode.ThemeColor(`statusBarItem.${level === "error" ? "error" : "warning"}Background`);
  }

  private reportError(what: string, err: unknown): void {
    const message = err instanceof Error ? err.message : String(err);
    this.output.appendLine(`${what} failed: ${message}`);
    void vscode.window.showErrorMessage(`${what} failed: ${message}`, "Show log").then((choice) => {
      if (choice) {
        this.output.show();
      }
    });
  }

  async withErrors<T>(what: string, run: () => Promise<T>): Promise<T | undefined> {
    try {
      return await run();
    } catch (err) {
      this.reportError(what, err);
      return undefined;
    } finally {
      this.render();
    }
  }

  register(): void {
    const command = (id: string, what: string, run: () => Promise<unknown>): void => {
      this.subscriptions.push(vscode.commands.registerCommand(id, () => this.withErrors(what, run)));
    };
    command("compactd.compact", "Compaction", () => this.compact(undefined));
    command("compactd.compactWithInstructions", "Compaction", () => this.compactWithInstructions());
    command("compactd.showBreakdown", "Token breakdown", () => this.showBreakdown());
    command("compactd.selectSession", "Opening the session", () => this.selectSession());
    command("compactd.refresh", "Refreshing the token status", () => this.refresh());
    command("compactd.restart", "Starting compactd", () => this.restart());
    this.subscriptions.push(
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration("compactd.serverCommand") || e.affectsConfiguration("compactd.dataDir")) {
          void this.restart();
        }
      }),
    );
    this.context.subscriptions.push(this);
  }

  async start(): Promise<void> {
    await this.withErrors("Starting compactd", async () => {
      await this.ensureClient();
      const initial = this.config().get<string>("sessionId");
      if (initial) {
        await this.openSession(initial);
      }
    });
  }

  dispose(): void {
    for (const d of this.subscriptions) {
      d.dispose();
    }
    this.item.dispose();
    this.output.dispose();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    await client?.dispose();
    this.render();
  }
}

/** A transcript's Claude Code session id (its file name), made safe for compactd's id rules. */
function sessionIdFor(transcript: string): string {
  return path.basename(transcript, ".jsonl").replace(/[^A-Za-z0-9._-]/g, "-");
}

async function recentTranscripts(dir: string, limit = 10): Promise<Array<{ file: string; modified: Date }>> {
  try {
    const names = (await fs.readdir(dir)).filter((n) => n.endsWith(".jsonl"));
    const stats = await Promise.all(
      names.map(async (n) => {
        const file = path.join(dir, n);
        return { file, modified: (await fs.stat(file)).mtime };
      }),
    );
    return stats.sort((a, b) => b.modified.getTime() - a.modified.getTime()).slice(0, limit);
  } catch {
    return []; // no Claude Code history for this workspace
  }
}

let controller: Controller | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<CompactdApi> {
  const ctl = new Controller(context);
  controller = ctl;
  ctl.register();
  await ctl.start();
  return {
    client: () => ctl.currentClient(),
    setActiveSession: (sessionId) => ctl.setActiveSession(sessionId),
    activeSession: () => ctl.activeSession(),
  };
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
  controller = undefined;
}
