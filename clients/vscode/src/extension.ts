/**
 * VS Code glue for compactd: finds and starts the daemon through the client core, shows how much
 * of the context window the active session has left in the status bar, runs compactions behind a
 * cancellable progress notification, and shows the token breakdown. Everything protocol-shaped
 * lives in `core.ts`, everything person-facing in `format.ts`, finding the daemon in `locate.ts`
 * and Claude Code's folders in `transcripts.ts`; this module only wires them to VS Code. Other
 * extensions (the agent itself) get the running client and can choose the session to display
 * through the API returned by `activate`.
 */

import * as os from "node:os";
import { PythonExtension } from "@vscode/python-extension";
import * as vscode from "vscode";

import { CompactdClient, CompactdError, type InitializationOptions, type StatusNotification, type TokenStatus } from "./core";
import {
  breakdownRows,
  breakdownTable,
  compactionOutcome,
  groupDigits,
  levelOf,
  progressUpdate,
  sessionRows,
  statusBarText,
  statusTooltip,
  thresholdWarning,
} from "./format";
import { locateServer, type LocatedServer } from "./locate";
import { Notices } from "./notices";
import { sessionIdFor, workspaceTranscripts } from "./transcripts";

/** What other extensions get from `vscode.extensions.getExtension(...).exports`. */
export interface CompactdApi {
  /** The running client, or undefined while the daemon is down. */
  client(): CompactdClient | undefined;
  /** Show this session in the status bar and make it the target of the commands. */
  setActiveSession(sessionId: string): Promise<void>;
  /** The session shown in the status bar. */
  activeSession(): string | undefined;
}

const STATUS_ICON = "$(fold)";
const PYTHON_EXTENSION = "ms-python.python";

/** Settings the daemon is started with: a change restarts it. */
const RESTART_SETTINGS = ["serverCommand", "dataDir", "summarizer", "keepAliveIntervalMs", "env"].map((k) => `compactd.${k}`);

/**
 * How long the settings must stay unchanged before the daemon restarts. The Settings editor saves
 * every item of a list as it is typed, so one edit of `serverCommand` is a burst of changes a few
 * seconds apart; a restart after each would start half-written commands.
 */
export const RESTART_DEBOUNCE_MS = 1_500;

/** workspaceState: the session on display in this workspace, restored on the next window. */
const ACTIVE_SESSION_KEY = "compactd.activeSession";
/** globalState: the "compactd was not found" toast was shown; no other window repeats it. */
const NOT_FOUND_SHOWN_KEY = "compactd.notFoundShown";

const NOT_FOUND_TEXT =
  "compactd was not found: it is not on PATH and the selected Python interpreter does not have it. " +
  "Select an interpreter with compactd installed, or set compactd.serverCommand.";

/** No daemon command could be found (see `locate.ts`). */
class ServerNotFoundError extends Error {
  constructor() {
    super("compactd was not found (not on PATH, not in the selected Python interpreter)");
    this.name = "ServerNotFoundError";
  }
}

/** A failure the person was already told about; callers must not report it again. */
class ReportedError extends Error {
  constructor(readonly cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause));
    this.name = "ReportedError";
  }
}

class Controller implements vscode.Disposable {
  private client: CompactdClient | undefined;
  private starting: Promise<CompactdClient> | undefined;
  private notFound = false;
  private sessionId: string | undefined;
  private lastStatus: TokenStatus | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly notices = new Notices();
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

  /**
   * The running client; starts the daemon on first use. A failed start is reported here, once,
   * and rethrown as a `ReportedError`. `explicit`: the person asked for it (a command, a restart),
   * so even the "not found" toast shows again.
   */
  async ensureClient(explicit = true): Promise<CompactdClient> {
    if (this.client?.running) {
      return this.client;
    }
    this.starting ??= this.startClient()
      .catch((err: unknown) => {
        this.reportStartFailure(err, explicit);
        throw new ReportedError(err);
      })
      .finally(() => {
        this.starting = undefined;
      });
    return this.starting;
  }

  /** The interpreter the Python extension has selected for this workspace, if it is installed. */
  private async pythonInterpreter(): Promise<string | undefined> {
    if (!vscode.extensions.getExtension(PYTHON_EXTENSION)) {
      return undefined;
    }
    const api = await PythonExtension.api();
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const environment = await api.environments.resolveEnvironment(api.environments.getActiveEnvironmentPath(folder));
    return environment?.executable.uri?.fsPath;
  }

  private async locate(): Promise<LocatedServer> {
    const located = await locateServer({
      setting: this.config().get<string[]>("serverCommand"),
      cwd: this.workspaceDir(),
      interpreter: () => this.pythonInterpreter(),
      log: (line) => this.output.appendLine(line),
    });
    if (!located) {
      this.notFound = true;
      throw new ServerNotFoundError();
    }
    this.notFound = false;
    const from = { setting: "the compactd.serverCommand setting", PATH: "PATH", "Python interpreter": "the Python extension's interpreter" };
    this.output.appendLine(`using the daemon from ${from[located.source]}: ${located.detail}`);
    return located;
  }

  private async startClient(): Promise<CompactdClient> {
    const config = this.config();
    const { command } = await this.locate();
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
        if (this.notices.textOf("threshold") !== thresholdWarning(status)) {
          // The level dropped (a compaction) or changed: the warning on screen no longer holds.
          void this.notices.withdraw("threshold");
        }
      }
    });
    client.onThreshold((note) => {
      // One append can cross several levels at once: warn for the highest one only.
      const highest = note.level === "blocking" || (note.level === "error" && !note.status.isAtBlockingLimit);
      const warning = thresholdWarning(note.status);
      if (note.sessionId === this.sessionId && highest && warning) {
        void this.notices.show("threshold", "warning", warning, ["Compact now"]).then((choice) => {
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
    // Connected: a toast about an earlier failed start is stale now.
    await this.notices.withdraw("start");
    void this.context.globalState.update(NOT_FOUND_SHOWN_KEY, undefined);
    if (this.sessionId) {
      // A restarted daemon restores sessions from its transcripts; re-open the one on display.
      await this.openSession(this.sessionId).catch((err: unknown) => this.reportError("Reopening the session", err));
    }
    return client;
  }

  private reportStartFailure(err: unknown, explicit: boolean): void {
    this.render();
    if (err instanceof ServerNotFoundError) {
      this.output.appendLine(NOT_FOUND_TEXT);
      // One toast for the whole machine, not one per window, until a daemon is found again.
      if (!explicit && this.context.globalState.get<boolean>(NOT_FOUND_SHOWN_KEY)) {
        return;
      }
      void this.context.globalState.update(NOT_FOUND_SHOWN_KEY, true);
      void this.notices
        .show("start", "error", NOT_FOUND_TEXT, ["Select interpreter", "Open settings", "Show log"], explicit)
        .then((choice) => this.onStartChoice(choice));
      return;
    }
    const message = err instanceof Error ? err.message : String(err);
    this.output.appendLine(`Starting compactd failed: ${message}`);
    void this.notices
      .show("start", "error", `Starting compactd failed: ${message}`, ["Open settings", "Show log"], explicit)
      .then((choice) => this.onStartChoice(choice));
  }

  private onStartChoice(choice: string | undefined): void {
    if (choice === "Select interpreter") {
      // With the Python extension, its picker; without it, the way to install it.
      void (vscode.extensions.getExtension(PYTHON_EXTENSION)
        ? vscode.commands.executeCommand("python.setInterpreter")
        : vscode.commands.executeCommand("workbench.extensions.search", `@id:${PYTHON_EXTENSION}`));
    } else if (choice === "Open settings") {
      void vscode.commands.executeCommand("workbench.action.openSettings", "compactd.serverCommand");
    } else if (choice === "Show log") {
      this.output.show();
    }
  }

  async restart(explicit = true): Promise<void> {
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    const old = this.client;
    this.client = undefined;
    await old?.dispose();
    await this.withErrors("Starting compactd", () => this.ensureClient(explicit));
  }

  /** Restart once the settings (or the interpreter) have stopped changing for a moment. */
  private scheduleRestart(why: string): void {
    this.output.appendLine(`${why}: restarting the daemon in ${RESTART_DEBOUNCE_MS} ms unless more changes come`);
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => void this.restart(false), RESTART_DEBOUNCE_MS);
  }

  // -- sessions ----------------------------------------------------------------------------------

  async setActiveSession(sessionId: string): Promise<void> {
    await this.openSession(sessionId);
  }

  private async openSession(sessionId: string, transcriptPath?: string): Promise<void> {
    const client = await this.ensureClient();
    const config = this.config();
    const contextWindow = config.get<number | null>("contextWindow") || undefined;
    // No model set: the daemon takes the one the transcript names, else the session's own.
    const model = config.get<string>("model")?.trim() || undefined;
    const opened = await client.openSession({
      sessionId,
      cwd: this.workspaceDir(),
      ...(model ? { model } : {}),
      ...(contextWindow ? { contextWindow } : {}),
      ...(transcriptPath ? { transcriptPath } : {}),
    });
    if (opened.sessionId !== this.sessionId) {
      await this.notices.withdraw("threshold"); // it was about the other session
    }
    this.sessionId = opened.sessionId;
    this.lastStatus = opened.status;
    await this.context.workspaceState.update(ACTIVE_SESSION_KEY, opened.sessionId);
    this.render();
  }

  /** Quick pick: one row per session, the daemon's and this workspace's Claude Code transcripts. */
  async selectSession(): Promise<void> {
    const client = await this.ensureClient();
    type Pick = vscode.QuickPickItem & { sessionId?: string; transcript?: string; browse?: boolean };
    const listed = await client.listSessions();
    const transcripts = await workspaceTranscripts(os.homedir(), this.workspaceDir());
    const items: Pick[] = [];
    let group: string | undefined;
    for (const row of sessionRows(listed.sessions, transcripts)) {
      if (row.group !== group) {
        group = row.group;
        const label = group === "daemon" ? "compactd sessions" : "Claude Code transcripts of this workspace";
        items.push({ label, kind: vscode.QuickPickItemKind.Separator });
      }
      items.push({ ...row, ...(row.sessionId === this.sessionId ? { picked: true } : {}) });
    }
    items.push({ label: "$(file) Import a transcript file…", browse: true });
    const choice = await vscode.window.showQuickPick(items, { placeHolder: "Session to show and compact", matchOnDetail: true });
    if (!choice) {
      return;
    }
    if (choice.browse) {
      const files = await vscode.window.showOpenDialog({
        canSelectMany: false,
        filters: { "Claude Code transcript": ["jsonl"] },
      });
      const file = files?.[0]?.fsPath;
      if (file) {
        // Claude Code names transcripts by session id: reusing it re-opens an earlier import.
        const id = sessionIdFor(file);
        await this.openSession(id, listed.sessions.some((s) => s.sessionId === id) ? undefined : file);
      }
    } else if (choice.sessionId) {
      await this.openSession(choice.sessionId, choice.transcript);
    }
  }

  /** The session of the last window in this workspace (or the setting), if the daemon has it. */
  private async restoreSession(): Promise<void> {
    const remembered = this.context.workspaceState.get<string>(ACTIVE_SESSION_KEY);
    const configured = this.config().get<string>("sessionId");
    if (remembered) {
      const client = await this.ensureClient(false);
      if ((await client.listSessions()).sessions.some((s) => s.sessionId === remembered)) {
        this.output.appendLine(`showing session ${remembered}, as in the last window of this workspace`);
        await this.openSession(remembered);
        return;
      }
      this.output.appendLine(`the session of the last window (${remembered}) is gone from the data dir`);
      await this.context.workspaceState.update(ACTIVE_SESSION_KEY, undefined);
    }
    if (configured) {
      await this.openSession(configured);
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
        let shown: string | undefined;
        const listener = client.onStatus((note: StatusNotification) => {
          // Only this session's manual compaction; an auto one may run for another session.
          if (note.sessionId !== sessionId || (compactionId !== undefined && note.compactionId !== compactionId)) {
            return;
          }
          compactionId ??= note.compactionId;
          const text = progressUpdate(note, shown);
          if (text !== undefined) {
            shown = text;
            progress.report({ message: text });
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
      item.text = `${STATUS_ICON} compactd: ${this.notFound ? "not found" : "stopped"}`;
      item.tooltip = this.notFound
        ? "No compactd daemon was found. Click to look again and for the ways to set one up."
        : "The compactd daemon is not running. Click to start it.";
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
    if (err instanceof ReportedError) {
      return;
    }
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
        const changed = RESTART_SETTINGS.find((s) => e.affectsConfiguration(s));
        if (changed) {
          this.scheduleRestart(`${changed} changed`);
        }
      }),
    );
    this.context.subscriptions.push(this);
  }

  /** Follow the Python extension's interpreter when the daemon comes from it (or was not found). */
  private async watchInterpreter(): Promise<void> {
    if (!vscode.extensions.getExtension(PYTHON_EXTENSION)) {
      return;
    }
    const api = await PythonExtension.api();
    this.subscriptions.push(
      api.environments.onDidChangeActiveEnvironmentPath(() => {
        const setting = this.config().get<string[]>("serverCommand");
        if (!setting || setting.length === 0) {
          this.scheduleRestart("the Python interpreter changed");
        }
      }),
    );
  }

  async start(): Promise<void> {
    // In the background: activating the Python extension can take a while, and the daemon may
    // not need it (the setting, PATH).
    void this.watchInterpreter().catch((err: unknown) =>
      this.output.appendLine(`cannot follow the Python extension's interpreter: ${err instanceof Error ? err.message : String(err)}`),
    );
    await this.withErrors("Starting compactd", async () => {
      await this.ensureClient(false);
      await this.restoreSession();
    });
  }

  dispose(): void {
    clearTimeout(this.restartTimer);
    for (const d of this.subscriptions) {
      d.dispose();
    }
    this.item.dispose();
    this.output.dispose();
  }

  async stop(): Promise<void> {
    clearTimeout(this.restartTimer);
    const client = this.client;
    this.client = undefined;
    await client?.dispose();
    this.render();
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
