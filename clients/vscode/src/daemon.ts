/**
 * The daemon's life in the editor: finding it (`locate.ts`: the setting, PATH, the Python
 * extension's interpreter), starting it on first use, telling the person once when it cannot be
 * found or fails to start, restarting it when the settings or the interpreter change (debounced),
 * and stopping it. Features do not hold the client: they ask `ensureClient()` when they need it,
 * and subscribe to each new client's events through `onClient`.
 */

import { PythonExtension } from "@vscode/python-extension";
import * as vscode from "vscode";

import { CompactdClient, type InitializationOptions } from "./core";
import { PYTHON_EXTENSION, selectedInterpreter } from "./interpreter";
import { locateServer, type LocatedServer } from "./locate";
import { ReportedError, settings, workspaceDir, type Ui } from "./ui";


/** Settings the daemon is started with: a change restarts it. */
const RESTART_SETTINGS = ["serverCommand", "dataDir", "summarizer", "keepAliveIntervalMs", "env", "autoCompactTokens"].map((k) => `compactd.${k}`);

/**
 * How long the settings must stay unchanged before the daemon restarts. The Settings editor saves
 * every item of a list as it is typed, so one edit of `serverCommand` is a burst of changes a few
 * seconds apart; a restart after each would start half-written commands.
 */
export const RESTART_DEBOUNCE_MS = 1_500;

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

/** What a feature does with each client that connects. */
export interface ClientHooks {
  /** Subscribe to the client's events; runs before the client is handed out. */
  attach?(client: CompactdClient): void;
  /** Runs once the client is connected and handed out (re-open the session on display). */
  connected?(client: CompactdClient): Promise<void>;
}

export class Daemon implements vscode.Disposable {
  private client: CompactdClient | undefined;
  private starting: Promise<CompactdClient> | undefined;
  private notFound = false;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly hooks: ClientHooks[] = [];
  private readonly subscriptions: vscode.Disposable[] = [];

  /** `changed`: the daemon started, stopped or was not found (the gauge redraws). */
  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly ui: Ui,
    private readonly changed: () => void,
  ) {}

  /** Run `hooks` for every client from now on. */
  onClient(hooks: ClientHooks): void {
    this.hooks.push(hooks);
  }

  /** What the status bar says about the daemon itself. */
  get state(): "running" | "starting" | "stopped" | "not found" {
    if (this.client?.running) {
      return "running";
    }
    if (this.starting) {
      return "starting";
    }
    return this.notFound ? "not found" : "stopped";
  }

  /** The running client, without starting one. */
  current(): CompactdClient | undefined {
    return this.client?.running ? this.client : undefined;
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

  private async locate(): Promise<LocatedServer> {
    const located = await locateServer({
      setting: settings().get<string[]>("serverCommand"),
      cwd: workspaceDir(),
      interpreter: selectedInterpreter,
      log: (line) => this.ui.output.appendLine(line),
    });
    if (!located) {
      this.notFound = true;
      throw new ServerNotFoundError();
    }
    this.notFound = false;
    const from = { setting: "the compactd.serverCommand setting", PATH: "PATH", "Python interpreter": "the Python extension's interpreter" };
    this.ui.output.appendLine(`using the daemon from ${from[located.source]}: ${located.detail}`);
    return located;
  }

  private initializationOptions(): InitializationOptions {
    const config = settings();
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
    const level = config.get<number | null>("autoCompactTokens");
    if (level) {
      options.autoCompactTokens = level;
    }
    const env = config.get<Record<string, string>>("env");
    if (env && Object.keys(env).length > 0) {
      options.env = env;
    }
    return options;
  }

  private async startClient(): Promise<CompactdClient> {
    const output = this.ui.output;
    const { command } = await this.locate();
    const dataDir = settings().get<string>("dataDir") || undefined;
    const client = new CompactdClient({
      command,
      dataDir,
      cwd: workspaceDir(),
      onStderr: (text) => output.append(text),
    });
    output.appendLine(`starting ${command.join(" ")}${dataDir ? ` --data-dir ${dataDir}` : ""}`);
    await client.start();
    try {
      const server = await client.initialize(this.initializationOptions());
      output.appendLine(`connected to ${server.name} ${server.version} (protocol ${server.protocolVersion})`);
    } catch (err) {
      await client.dispose(1_000);
      throw err;
    }
    for (const hooks of this.hooks) {
      hooks.attach?.(client);
    }
    client.onMemoryChanged((note) => output.appendLine(`memory file ${note.change}: ${note.path}`));
    client.onCacheBreak((note) => output.appendLine(`prompt cache break (${note.querySource}): ${note.explanation}`));
    client.onExit((info) => {
      if (this.client === client) {
        this.client = undefined;
        this.changed();
      }
      if (!info.expected) {
        output.appendLine(`compactd exited unexpectedly (code ${info.code}, signal ${info.signal})`);
        void vscode.window.showErrorMessage("The compactd daemon stopped.", "Restart", "Show log").then((choice) => {
          if (choice === "Restart") {
            void this.restart();
          } else if (choice === "Show log") {
            output.show();
          }
        });
      }
    });
    this.client = client;
    // Connected: a toast about an earlier failed start is stale now.
    await this.ui.notices.withdraw("start");
    void this.context.globalState.update(NOT_FOUND_SHOWN_KEY, undefined);
    for (const hooks of this.hooks) {
      await hooks.connected?.(client);
    }
    return client;
  }

  private reportStartFailure(err: unknown, explicit: boolean): void {
    this.changed();
    const output = this.ui.output;
    if (err instanceof ServerNotFoundError) {
      output.appendLine(NOT_FOUND_TEXT);
      // One toast for the whole machine, not one per window, until a daemon is found again.
      if (!explicit && this.context.globalState.get<boolean>(NOT_FOUND_SHOWN_KEY)) {
        return;
      }
      void this.context.globalState.update(NOT_FOUND_SHOWN_KEY, true);
      void this.ui.notices
        .show("start", "error", NOT_FOUND_TEXT, ["Select interpreter", "Open settings", "Show log"], explicit)
        .then((choice) => this.onStartChoice(choice));
      return;
    }
    const message = err instanceof Error ? err.message : String(err);
    output.appendLine(`Starting compactd failed: ${message}`);
    void this.ui.notices
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
      this.ui.output.show();
    }
  }

  async restart(explicit = true): Promise<void> {
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    const old = this.client;
    this.client = undefined;
    await old?.dispose();
    await this.ui.withErrors("Starting compactd", () => this.ensureClient(explicit));
  }

  /** Restart once the settings (or the interpreter) have stopped changing for a moment. */
  private scheduleRestart(why: string): void {
    this.ui.output.appendLine(`${why}: restarting the daemon in ${RESTART_DEBOUNCE_MS} ms unless more changes come`);
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => void this.restart(false), RESTART_DEBOUNCE_MS);
  }

  /** Restart when a setting the daemon is started with changes. */
  watchSettings(): void {
    this.subscriptions.push(
      vscode.workspace.onDidChangeConfiguration((e) => {
        const changed = RESTART_SETTINGS.find((s) => e.affectsConfiguration(s));
        if (changed) {
          this.scheduleRestart(`${changed} changed`);
        }
      }),
    );
  }

  /** Follow the Python extension's interpreter when the daemon comes from it (or was not found). */
  async watchInterpreter(): Promise<void> {
    if (!vscode.extensions.getExtension(PYTHON_EXTENSION)) {
      return;
    }
    const api = await PythonExtension.api();
    this.subscriptions.push(
      api.environments.onDidChangeActiveEnvironmentPath(() => {
        const setting = settings().get<string[]>("serverCommand");
        if (!setting || setting.length === 0) {
          this.scheduleRestart("the Python interpreter changed");
        }
      }),
    );
  }

  /** Shut the daemon down (deactivation). */
  async stop(): Promise<void> {
    clearTimeout(this.restartTimer);
    const client = this.client;
    this.client = undefined;
    await client?.dispose();
    this.changed();
  }

  dispose(): void {
    clearTimeout(this.restartTimer);
    for (const d of this.subscriptions) {
      d.dispose();
    }
  }
}
