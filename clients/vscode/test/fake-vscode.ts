/**
 * A stand-in for the part of the `vscode` module the extension uses, so `extension.ts` can be
 * activated under plain Node against the real daemon. VS Code itself cannot run here; this
 * records what the extension shows (status bar, messages, quick picks, progress) and lets a test
 * answer prompts and cancel a progress notification. Only VS Code is replaced: the client core,
 * the daemon and the emulator are the real ones.
 */

import Module from "node:module";
import { CancellationTokenSource, Emitter } from "vscode-jsonrpc/node";

export interface Shown {
  kind: "info" | "warning" | "error";
  message: string;
  items: string[];
  /** Still waiting for a button or a close (VS Code resolves the promise then). */
  open: boolean;
  /** On screen as a toast: open and not hidden (`notifications.hideToasts` hides them all). */
  visible: boolean;
  /** Press a button (or close the toast with undefined). */
  press(choice: string | undefined): void;
}

export interface ProgressRun {
  title: string | undefined;
  cancellable: boolean;
  reports: string[];
  /** Press the notification's Cancel button. */
  cancel(): void;
}

class StatusBarItem {
  text = "";
  tooltip: string | undefined;
  command: string | undefined;
  backgroundColor: ThemeColor | undefined;
  name: string | undefined;
  visible = false;
  constructor(readonly id: string) {}
  show(): void {
    this.visible = true;
  }
  hide(): void {
    this.visible = false;
  }
  dispose(): void {
    this.visible = false;
  }
}

class ThemeColor {
  constructor(readonly id: string) {}
}

class OutputChannel {
  text = "";
  constructor(readonly name: string) {}
  append(value: string): void {
    this.text += value;
  }
  appendLine(value: string): void {
    this.text += value + "\n";
  }
  show(): void {}
  dispose(): void {}
}

/** A webview panel: its document as the extension set it, and whether it is still open. */
export class WebviewPanel {
  title: string;
  readonly webview = { html: "", cspSource: "vscode-webview://fake" };
  disposed = false;
  reveals = 0;
  private readonly disposeEmitter = new Emitter<void>();
  readonly onDidDispose = this.disposeEmitter.event;
  constructor(
    readonly viewType: string,
    title: string,
    readonly options: Record<string, unknown>,
  ) {
    this.title = title;
  }
  reveal(): void {
    this.reveals++;
  }
  /** The person closes the panel. */
  dispose(): void {
    if (!this.disposed) {
      this.disposed = true;
      this.disposeEmitter.fire();
    }
  }
}

/** A terminal: what it was created with and the text sent to it. */
export class Terminal {
  readonly sent: string[] = [];
  shown = false;
  constructor(readonly options: { name?: string; cwd?: string }) {}
  get name(): string | undefined {
    return this.options.name;
  }
  sendText(text: string): void {
    this.sent.push(text);
  }
  show(): void {
    this.shown = true;
  }
  dispose(): void {}
}

/** A Memento (workspaceState, globalState) kept in memory. */
export class Memento {
  readonly values = new Map<string, unknown>();
  get<T>(key: string, fallback?: T): T | undefined {
    return this.values.has(key) ? (this.values.get(key) as T) : fallback;
  }
  update(key: string, value: unknown): Promise<void> {
    if (value === undefined) {
      this.values.delete(key);
    } else {
      this.values.set(key, value);
    }
    return Promise.resolve();
  }
  keys(): readonly string[] {
    return [...this.values.keys()];
  }
}

/** The part of the Python extension's API the extension asks (ms-python.python's exports). */
export class FakePythonExtension {
  /** The interpreter selected for the workspace (undefined: none). */
  interpreter: string | undefined;
  private readonly changed = new Emitter<unknown>();
  readonly exports = {
    environments: {
      getActiveEnvironmentPath: () => ({ id: "active", path: this.interpreter ?? "" }),
      resolveEnvironment: async (env: { path: string }) =>
        env.path ? { executable: { uri: { fsPath: env.path } } } : undefined,
      onDidChangeActiveEnvironmentPath: this.changed.event,
    },
  };
  readonly isActive = true;
  activate(): Promise<unknown> {
    return Promise.resolve(this.exports);
  }
  /** The person picks another interpreter. */
  select(interpreter: string | undefined): void {
    this.interpreter = interpreter;
    this.changed.fire({ path: interpreter ?? "" });
  }
}

/** The fake module and the handles a test inspects. */
export class FakeVscode {
  readonly settings: Record<string, unknown> = {};
  readonly statusItems: StatusBarItem[] = [];
  readonly outputs: OutputChannel[] = [];
  readonly shown: Shown[] = [];
  readonly quickPicks: Array<{ items: Array<{ label: string; description?: string }>; title?: string }> = [];
  readonly progress: ProgressRun[] = [];
  readonly panels: WebviewPanel[] = [];
  readonly terminals: Terminal[] = [];
  readonly commands = new Map<string, (...args: unknown[]) => unknown>();
  /** VS Code's own commands the extension ran (`notifications.hideToasts`, ...), with arguments. */
  readonly builtins: Array<{ id: string; args: unknown[] }> = [];
  /** Installed extensions by id; `python` is ms-python.python when set. */
  python: FakePythonExtension | undefined;
  /** Chooses the quick pick's answer (undefined = the person pressed Escape). */
  pick: ((items: Array<{ label: string; description?: string }>) => unknown) | undefined;
  /** The folder open in the window (undefined = no folder). */
  workspaceFolder: string | undefined;
  /** What the next input box answers (undefined = the person pressed Escape). */
  inputBoxAnswer: string | undefined;
  /** Which button the person presses on a message (undefined = they close it). */
  answer: ((shown: Shown) => string | undefined) | undefined;
  /** Called with each progress run when it starts (to cancel it at the right moment). */
  onProgress: ((run: ProgressRun) => void) | undefined;
  private readonly configEmitter = new Emitter<{ affectsConfiguration(section: string): boolean }>();

  /** The object `require("vscode")` returns. */
  readonly module: Record<string, unknown>;

  constructor() {
    const fake = this;
    this.module = {
      StatusBarAlignment: { Left: 1, Right: 2 },
      ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
      QuickPickItemKind: { Separator: -1, Default: 0 },
      ViewColumn: { Active: -1, Beside: -2, One: 1, Two: 2 },
      ThemeColor,
      window: {
        createOutputChannel: (name: string) => {
          const channel = new OutputChannel(name);
          fake.outputs.push(channel);
          return channel;
        },
        createStatusBarItem: (id: string) => {
          const item = new StatusBarItem(id);
          fake.statusItems.push(item);
          return item;
        },
        showInformationMessage: (message: string, ...items: string[]) => fake.show("info", message, items),
        showWarningMessage: (message: string, ...items: string[]) => fake.show("warning", message, items),
        showErrorMessage: (message: string, ...items: string[]) => fake.show("error", message, items),
        showQuickPick: async (items: Array<{ label: string }>, options?: { title?: string }) => {
          fake.quickPicks.push({ items: [...items], title: options?.title });
          return fake.pick?.(items);
        },
        showInputBox: async () => fake.inputBoxAnswer,
        createWebviewPanel: (viewType: string, title: string, _column: unknown, options: Record<string, unknown>) => {
          const panel = new WebviewPanel(viewType, title, options);
          fake.panels.push(panel);
          return panel;
        },
        createTerminal: (options: { name?: string; cwd?: string }) => {
          const terminal = new Terminal(options);
          fake.terminals.push(terminal);
          return terminal;
        },
        showOpenDialog: async () => undefined,
        withProgress: async <R>(
          options: { title?: string; cancellable?: boolean },
          task: (progress: { report(v: { message?: string }): void }, token: unknown) => Promise<R>,
        ): Promise<R> => {
          const source = new CancellationTokenSource();
          const run: ProgressRun = {
            title: options.title,
            cancellable: options.cancellable === true,
            reports: [],
            cancel: () => source.cancel(),
          };
          fake.progress.push(run);
          fake.onProgress?.(run);
          try {
            return await task({ report: (v) => run.reports.push(v.message ?? "") }, source.token);
          } finally {
            source.dispose();
          }
        },
      },
      commands: {
        registerCommand: (id: string, handler: (...args: unknown[]) => unknown) => {
          fake.commands.set(id, handler);
          return { dispose: () => fake.commands.delete(id) };
        },
        executeCommand: async (id: string, ...args: unknown[]) => {
          const handler = fake.commands.get(id);
          if (handler) {
            return handler(...args);
          }
          if (!/^(notifications|python|workbench)\./.test(id)) {
            throw new Error(`command '${id}' not found`);
          }
          fake.builtins.push({ id, args });
          if (id === "notifications.hideToasts") {
            for (const shown of fake.shown) {
              shown.visible = false;
            }
          }
          return undefined;
        },
      },
      extensions: {
        getExtension: (id: string) => (id === "ms-python.python" ? fake.python : undefined),
      },
      workspace: {
        get workspaceFolders() {
          return fake.workspaceFolder === undefined ? undefined : [{ uri: { fsPath: fake.workspaceFolder }, name: "ws", index: 0 }];
        },
        getConfiguration: (section: string) => ({
          get: <T>(key: string, fallback?: T): T | undefined => {
            const value = fake.settings[`${section}.${key}`];
            return value === undefined ? fallback : (value as T);
          },
        }),
        onDidChangeConfiguration: this.configEmitter.event,
      },
    };
  }

  /** Change a setting as the Settings editor does: store it, then fire the change event. */
  setSetting(key: string, value: unknown): void {
    if (value === undefined) {
      delete this.settings[key];
    } else {
      this.settings[key] = value;
    }
    this.configEmitter.fire({ affectsConfiguration: (section: string) => key === section || key.startsWith(`${section}.`) });
  }

  /** The toasts on screen now, of one kind or all. */
  visible(kind?: Shown["kind"]): Shown[] {
    return this.shown.filter((s) => s.visible && (kind === undefined || s.kind === kind));
  }

  private show(kind: Shown["kind"], message: string, items: string[]): Promise<string | undefined> {
    let resolve: (choice: string | undefined) => void = () => undefined;
    const closed = new Promise<string | undefined>((r) => {
      resolve = r;
    });
    const shown: Shown = {
      kind,
      message,
      items,
      open: true,
      visible: true,
      press: (choice) => {
        if (shown.open) {
          shown.open = false;
          shown.visible = false;
          resolve(choice);
        }
      },
    };
    this.shown.push(shown);
    const choice = this.answer?.(shown);
    if (choice !== undefined) {
      shown.press(choice);
    }
    return closed;
  }

  /** The status bar item of the latest activation (each activation creates one). */
  get statusItem(): StatusBarItem {
    const item = this.statusItems[this.statusItems.length - 1];
    if (!item) {
      throw new Error("the extension created no status bar item");
    }
    return item;
  }

  get output(): string {
    return this.outputs.map((o) => o.text).join("");
  }

  /** Make `require("vscode")` return this fake, for modules loaded after this call. */
  install(): void {
    const loader = Module as unknown as {
      _resolveFilename(request: string, ...rest: unknown[]): string;
      _cache: Record<string, unknown>;
    };
    const resolve = loader._resolveFilename;
    loader._resolveFilename = function (request: string, ...rest: unknown[]): string {
      return request === "vscode" ? "vscode" : resolve.call(this, request, ...rest);
    };
    require.cache["vscode"] = { id: "vscode", filename: "vscode", loaded: true, exports: this.module } as unknown as NodeJS.Module;
  }
}

export interface FakeContext {
  subscriptions: Array<{ dispose(): unknown }>;
  workspaceState: Memento;
  globalState: Memento;
}

/** What VS Code does after `deactivate()`: dispose what the extension put in `subscriptions`. */
export function disposeSubscriptions(context: FakeContext): void {
  for (const d of context.subscriptions.splice(0)) {
    d.dispose();
  }
}

/**
 * The part of ExtensionContext the extension uses. Pass `globalState` to share it with an earlier
 * context, as two windows of one machine do; `workspaceState`, as two windows of one folder.
 */
export function fakeContext(shared: Partial<Pick<FakeContext, "workspaceState" | "globalState">> = {}): FakeContext {
  return {
    subscriptions: [],
    workspaceState: shared.workspaceState ?? new Memento(),
    globalState: shared.globalState ?? new Memento(),
  };
}
