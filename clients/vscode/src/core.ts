/**
 * The compactd client core: spawns `compactd serve`, speaks JSON-RPC 2.0 with LSP framing over
 * the child's stdio (vscode-jsonrpc), and offers typed methods and events for the protocol v1
 * table. It imports nothing from VS Code, so it runs (and is tested) in plain Node; the editor
 * glue in `extension.ts` builds on it. Wire types come from `protocol/compactd.d.ts`, which is
 * generated from the daemon's Python protocol module, so a renamed method or field breaks the
 * build instead of failing at run time; `PROTOCOL_VERSION` is generated beside them.
 *
 * The client asks for LSP work-done progress (`window.workDoneProgress`): the daemon then
 * creates a progress (`window/workDoneProgress/create`) for a long operation (a compaction) and
 * reports it with `$/progress`; each begun one is an `onWorkDoneProgress` event, and cancelling
 * it sends `window/workDoneProgress/cancel`, which cancels the operation.
 */

import { spawn, type ChildProcess } from "node:child_process";
import {
  CancellationTokenSource,
  Emitter,
  ErrorCodes,
  ProgressType,
  ResponseError,
  StreamMessageReader,
  StreamMessageWriter,
  createMessageConnection,
  type CancellationToken,
  type Disposable,
  type Event,
  type MessageConnection,
} from "vscode-jsonrpc/node";

import type {
  AppendResult,
  AutoResult,
  BreakdownResult,
  CacheBreak,
  ClaudeCodeCompactParams,
  ClaudeCodeCompactResult,
  CloseResult,
  CompactResult,
  ErrorCode,
  FollowedNotification,
  HistoryResult,
  InitializationOptions,
  ListResult,
  MemoryChangedNotification,
  MessagesResult,
  Methods,
  Notifications,
  OpenParams,
  OpenResult,
  PreviewResult,
  SessionInfo,
  StatusNotification,
  ThresholdNotification,
  TokenStatus,
} from "../../../protocol/compactd";
import { PROTOCOL_VERSION } from "./protocol-version";

export { PROTOCOL_VERSION };

export type {
  AutoResult,
  BreakdownResult,
  ClaudeCodeCompactParams,
  ClaudeCodeCompactResult,
  CompactResult,
  FollowedNotification,
  HistoryResult,
  PreviewResult,
  InitializationOptions,
  MemoryChangedNotification,
  OpenParams,
  OpenResult,
  SessionInfo,
  StatusNotification,
  ThresholdNotification,
  TokenStatus,
};

/** Every request method of protocol v1, as named in the generated contract. */
export type MethodName = keyof Methods;

/** What `compactd serve` is started with when nothing is configured: the console script on PATH. */
export const DEFAULT_SERVER_COMMAND: readonly string[] = ["compactd", "serve"];

/**
 * How long `dispose()` waits for the daemon to answer `shutdown` and exit before killing it.
 * The daemon closes its sessions (flushes transcripts) on exit, which takes milliseconds; a few
 * seconds leaves room for a slow disk without letting a hung daemon block the editor's exit.
 */
export const DEFAULT_SHUTDOWN_GRACE_MS = 5_000;

/** How many lines of the daemon's stderr are kept to explain an unexpected exit. */
const STDERR_TAIL_LINES = 50;

/**
 * How long a failed request waits for the rest of a dying daemon's stderr, to quote its last line.
 * The pipes close right after the process exits; this only bounds a child that keeps them open.
 */
const OUTPUT_DRAIN_MS = 1_000;

/** JSON-RPC's number for a cancelled request (LSP `RequestCancelled`). */
const REQUEST_CANCELLED = -32800;

/** LSP's work-done progress methods (the daemon creates, the client may cancel). */
const PROGRESS_CREATE = "window/workDoneProgress/create";
const PROGRESS_CANCEL = "window/workDoneProgress/cancel";

/** The values of `$/progress` for a work-done progress (LSP `WorkDoneProgressBegin/Report/End`). */
export type WorkDoneProgressValue =
  | { kind: "begin"; title: string; message?: string; percentage?: number; cancellable?: boolean }
  | { kind: "report"; message?: string; percentage?: number; cancellable?: boolean }
  | { kind: "end"; message?: string };

const WORK_DONE = new ProgressType<WorkDoneProgressValue>();

/**
 * One work-done progress the daemon began on this client: its title, its reports as they come, and
 * its end (`done` settles with the end's message, or undefined when the daemon went away first).
 */
export class WorkDoneProgress {
  readonly title: string;
  readonly cancellable: boolean;
  /** The latest message (the begin's, then each report's). */
  message: string | undefined;
  /** Settles when the progress ends. */
  readonly done: Promise<string | undefined>;
  private finish: (message: string | undefined) => void = () => undefined;
  private ended = false;
  private readonly reportEmitter = new Emitter<string | undefined>();
  /** A report: the new message (undefined when the report only moved the percentage). */
  readonly onReport: Event<string | undefined> = this.reportEmitter.event;

  constructor(
    readonly token: string | number,
    begin: { title: string; message?: string; cancellable?: boolean },
    private readonly sendCancel: () => void,
  ) {
    this.title = begin.title;
    this.message = begin.message;
    this.cancellable = begin.cancellable === true;
    this.done = new Promise((resolve) => {
      this.finish = resolve;
    });
  }

  /** Ask the daemon to cancel the operation behind this progress. */
  cancel(): void {
    if (!this.ended) {
      this.sendCancel();
    }
  }

  get isDone(): boolean {
    return this.ended;
  }

  /** @internal the client feeds `$/progress` values in. */
  report(message: string | undefined): void {
    if (!this.ended) {
      this.message = message ?? this.message;
      this.reportEmitter.fire(message);
    }
  }

  /** @internal */
  end(message: string | undefined): void {
    if (!this.ended) {
      this.ended = true;
      this.finish(message);
      this.reportEmitter.dispose();
    }
  }
}

/**
 * A cancellation signal from any source. VS Code's and vscode-jsonrpc's tokens both fit, so the
 * core never needs to import VS Code to accept the token of a `withProgress` notification.
 */
export interface CancellationLike {
  readonly isCancellationRequested: boolean;
  onCancellationRequested(listener: (e: unknown) => unknown): { dispose(): unknown };
}

export interface ClientOptions {
  /** argv of the daemon; the first element is the executable. Default: `compactd serve`. */
  command?: readonly string[];
  /** Passed as `--data-dir` (where session transcripts are stored). */
  dataDir?: string;
  /** Extra environment for the daemon, on top of this process's environment. */
  env?: Record<string, string>;
  /** Working directory of the daemon. */
  cwd?: string;
  /** Receives the daemon's stderr (its log) as it arrives. */
  onStderr?: (text: string) => void;
}

/** How the daemon process ended. */
export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when `dispose()` asked for it; false for a crash or a kill from outside. */
  expected: boolean;
}

/** A token status that came back from any call or notification, tagged with its session. */
export interface TokensChanged {
  sessionId: string;
  status: TokenStatus;
}

/**
 * An error answered by the daemon. `code` is the stable `data.code` string (`sessionNotFound`,
 * `cancelled`, `notImplemented`, ...); `number` is the JSON-RPC error number.
 */
export class CompactdError extends Error {
  readonly code: ErrorCode | string;
  readonly number: number;
  readonly data: Record<string, unknown>;

  constructor(number: number, message: string, data: Record<string, unknown>) {
    super(message);
    this.name = "CompactdError";
    this.number = number;
    this.data = data;
    const code = data["code"];
    if (typeof code === "string") {
      this.code = code;
    } else if (number === REQUEST_CANCELLED) {
      // vscode-jsonrpc can answer a cancellation itself, without the daemon's data.code.
      this.code = "cancelled";
    } else {
      this.code = `jsonrpc${number}`;
    }
  }

  get cancelled(): boolean {
    return this.code === "cancelled";
  }
}

/** The daemon is not running (never started, exited, or disposed). */
export class DaemonNotRunningError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DaemonNotRunningError";
  }
}

/** What the daemon says about itself in its `initialize` result. */
export interface ServerDescription {
  name: string;
  version: string;
  protocolVersion: string;
  methods: string[];
  notifications: string[];
}

/**
 * One daemon process and the connection to it. Create it, `start()`, `initialize()`, then call
 * methods; `dispose()` shuts the daemon down politely (shutdown + exit) and kills it if it hangs.
 */
export class CompactdClient {
  private readonly options: ClientOptions;
  private child: ChildProcess | undefined;
  private connection: MessageConnection | undefined;
  private exited: Promise<ExitInfo> | undefined;
  /** Settles once the daemon's stdout and stderr are closed: all of its log has been read. */
  private outputClosed: Promise<void> | undefined;
  private disposing = false;
  private stderrTail: string[] = [];
  private described: ServerDescription | undefined;

  private readonly statusEmitter = new Emitter<StatusNotification>();
  private readonly thresholdEmitter = new Emitter<ThresholdNotification>();
  private readonly memoryEmitter = new Emitter<MemoryChangedNotification>();
  private readonly cacheBreakEmitter = new Emitter<CacheBreak>();
  private readonly followedEmitter = new Emitter<FollowedNotification>();
  private readonly tokensEmitter = new Emitter<TokensChanged>();
  private readonly progressEmitter = new Emitter<WorkDoneProgress>();
  private readonly exitEmitter = new Emitter<ExitInfo>();
  /** Work-done progresses the daemon created and has not ended, by token. */
  private readonly progresses = new Map<string | number, { listener: Disposable; begun?: WorkDoneProgress }>();

  /** `compact/status`: phase changes and keep-alives of a running compaction. */
  readonly onStatus: Event<StatusNotification> = this.statusEmitter.event;
  /** `tokens/threshold`: a session crossed warning / error / auto-compact / blocking. */
  readonly onThreshold: Event<ThresholdNotification> = this.thresholdEmitter.event;
  /** `memory/changed`: a watched memory file (CLAUDE.md and the like) changed. */
  readonly onMemoryChanged: Event<MemoryChangedNotification> = this.memoryEmitter.event;
  /** `cache/break`: a prompt-cache break was detected. */
  readonly onCacheBreak: Event<CacheBreak> = this.cacheBreakEmitter.event;
  /** `session/followed`: lines the agent appended to a followed transcript were taken in. */
  readonly onFollowed: Event<FollowedNotification> = this.followedEmitter.event;
  /** Any fresh token status: from open, append, status, auto-compaction, a threshold or a followed line. */
  readonly onTokens: Event<TokensChanged> = this.tokensEmitter.event;
  /** The daemon began a work-done progress (a compaction this client asked for, say). */
  readonly onWorkDoneProgress: Event<WorkDoneProgress> = this.progressEmitter.event;
  /** The daemon process ended. */
  readonly onExit: Event<ExitInfo> = this.exitEmitter.event;

  constructor(options: ClientOptions = {}) {
    this.options = options;
  }

  /** The daemon's name, version and method list, known after `initialize()`. */
  get server(): ServerDescription | undefined {
    return this.described;
  }

  /** True between a successful `start()` and the daemon's exit. */
  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The process id of the daemon, while it runs. */
  get pid(): number | undefined {
    return this.running ? this.child?.pid : undefined;
  }

  /** The last lines the daemon wrote to stderr (its log), to explain a failure. */
  get stderr(): string {
    return this.stderrTail.join("");
  }

  /**
   * The daemon's own last word on stderr: its last non-blank line (a Python traceback ends with
   * the exception, argparse with "compactd: error: ..."). Undefined when it said nothing.
   */
  get lastErrorLine(): string | undefined {
    return lastLine(this.stderr);
  }

  /** Spawn the daemon and connect to its stdio. Resolves once the process is running. */
  async start(): Promise<void> {
    if (this.child !== undefined) {
      throw new Error("this client was already started; create a new one to restart");
    }
    const command = [...(this.options.command ?? DEFAULT_SERVER_COMMAND)];
    if (command.length === 0) {
      throw new Error("the compactd server command is empty");
    }
    if (this.options.dataDir) {
      command.push("--data-dir", this.options.dataDir);
    }
    const [exe, ...args] = command as [string, ...string[]];
    const child = spawn(exe, args, {
      cwd: this.options.cwd,
      env: { ...process.env, ...(this.options.env ?? {}) },
      stdio: ["pipe", "pipe", "pipe"],
      windowsHide: true,
    });
    this.child = child;
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (text: string) => this.onStderrData(text));
    this.outputClosed = new Promise<void>((resolve) => child.once("close", () => resolve()));
    this.exited = new Promise<ExitInfo>((resolve) => {
      child.once("exit", (code, signal) => {
        const info: ExitInfo = { code, signal, expected: this.disposing };
        // Pending requests would otherwise wait forever for a daemon that is gone, and so would
        // the progresses it began.
        this.connection?.dispose();
        this.endProgresses();
        resolve(info);
        this.exitEmitter.fire(info);
      });
    });
    await new Promise<void>((resolve, reject) => {
      const onSpawn = (): void => {
        child.off("error", onError);
        // Later errors (a failed kill, say) are reported through 'exit'; keep them from throwing.
        child.on("error", () => undefined);
        resolve();
      };
      const onError = (err: NodeJS.ErrnoException): void => {
        child.off("spawn", onSpawn);
        // No process came to be, so no 'exit' will follow: forget it, as if never started.
        this.child = undefined;
        this.exited = undefined;
        this.outputClosed = undefined;
        const hint = err.code === "ENOENT" ? " (is compactd installed, or the command path right?)" : "";
        reject(new DaemonNotRunningError(`could not start '${command.join(" ")}': ${err.message}${hint}`));
      };
      child.once("spawn", onSpawn);
      child.once("error", onError);
    });
    // Writing to a daemon that just died raises EPIPE on stdin; the exit event reports it.
    child.stdin?.on("error", () => undefined);
    const connection = createMessageConnection(
      new StreamMessageReader(child.stdout!),
      new StreamMessageWriter(child.stdin!),
    );
    this.connection = connection;
    this.listen(connection);
    connection.listen();
  }

  private onStderrData(text: string): void {
    this.options.onStderr?.(text);
    this.stderrTail.push(...text.split(/(?<=\n)/));
    if (this.stderrTail.length > STDERR_TAIL_LINES) {
      this.stderrTail = this.stderrTail.slice(-STDERR_TAIL_LINES);
    }
  }

  private listen(connection: MessageConnection): void {
    const on = <N extends keyof Notifications>(method: N, handler: (params: Notifications[N]) => void): void => {
      connection.onNotification(method, (params: Notifications[N]) => handler(params));
    };
    on("compact/status", (params) => this.statusEmitter.fire(params));
    on("tokens/threshold", (params) => {
      this.thresholdEmitter.fire(params);
      this.tokensEmitter.fire({ sessionId: params.sessionId, status: params.status });
    });
    on("memory/changed", (params) => this.memoryEmitter.fire(params));
    on("cache/break", (params) => this.cacheBreakEmitter.fire(params));
    on("session/followed", (params) => {
      this.followedEmitter.fire(params);
      this.tokensEmitter.fire({ sessionId: params.sessionId, status: params.status });
    });
    connection.onRequest(PROGRESS_CREATE, (params: { token: string | number }) => {
      this.trackProgress(connection, params.token);
      return null;
    });
  }

  /** Follow the `$/progress` of a token the daemon just created, until its end. */
  private trackProgress(connection: MessageConnection, token: string | number): void {
    const listener = connection.onProgress(WORK_DONE, token, (value) => {
      const entry = this.progresses.get(token);
      if (entry === undefined) {
        return;
      }
      if (value.kind === "begin" && entry.begun === undefined) {
        const sendCancel = (): void => void connection.sendNotification(PROGRESS_CANCEL, { token }).catch(() => undefined);
        entry.begun = new WorkDoneProgress(token, value, sendCancel);
        this.progressEmitter.fire(entry.begun);
      } else if (value.kind === "report") {
        entry.begun?.report(value.message);
      } else if (value.kind === "end") {
        entry.listener.dispose();
        this.progresses.delete(token);
        entry.begun?.end(value.message);
      }
    });
    this.progresses.set(token, { listener });
  }

  private endProgresses(): void {
    for (const { listener, begun } of this.progresses.values()) {
      listener.dispose();
      begun?.end(undefined);
    }
    this.progresses.clear();
  }

  /** `initialize` + `initialized`, with `initializationOptions`. Returns what the daemon is. */
  async initialize(options: InitializationOptions = {}): Promise<ServerDescription> {
    const result = await this.send<InitializeResult>("initialize", {
      processId: process.pid,
      rootUri: null,
      // Work-done progress: the daemon reports long operations with $/progress (see above).
      capabilities: { window: { workDoneProgress: true } },
      initializationOptions: options,
      clientInfo: { name: "compactd-vscode" },
    });
    await this.connectionOrThrow().sendNotification("initialized", {});
    const described = result.capabilities?.experimental?.compactd;
    this.described = {
      name: result.serverInfo?.name ?? "",
      version: result.serverInfo?.version ?? "",
      protocolVersion: described?.protocolVersion ?? "",
      methods: described?.methods ?? [],
      notifications: described?.notifications ?? [],
    };
    if (this.described.protocolVersion !== PROTOCOL_VERSION) {
      throw new Error(
        `the daemon speaks protocol version '${this.described.protocolVersion}', this client ${PROTOCOL_VERSION}`,
      );
    }
    return this.described;
  }

  /** Any protocol v1 request, typed by the generated contract. */
  request<M extends MethodName>(
    method: M,
    params: Methods[M]["params"],
    token?: CancellationLike,
  ): Promise<Methods[M]["result"]> {
    return this.send<Methods[M]["result"]>(method, params, token);
  }

  private connectionOrThrow(): MessageConnection {
    if (this.connection === undefined || !this.running) {
      const tail = this.stderr.trim();
      throw new DaemonNotRunningError(
        "the compactd daemon is not running" + (tail ? `; its last words:\n${tail}` : ""),
      );
    }
    return this.connection;
  }

  private async send<R>(method: string, params: unknown, token?: CancellationLike): Promise<R> {
    const connection = this.connectionOrThrow();
    // Bridge whatever token we were given to a vscode-jsonrpc one: cancelling it makes
    // vscode-jsonrpc send `$/cancelRequest` for exactly this request's id.
    const source = new CancellationTokenSource();
    const link = token?.onCancellationRequested(() => source.cancel());
    if (token?.isCancellationRequested) {
      source.cancel();
    }
    try {
      return await connection.sendRequest<R>(method, params, source.token as CancellationToken);
    } catch (err) {
      if (err instanceof ResponseError && err.code >= ErrorCodes.MessageWriteError && err.code <= ErrorCodes.ConnectionInactive) {
        // vscode-jsonrpc's own codes: the connection broke, the daemon did not answer. Its words
        // ("Pending response rejected since connection got disposed") explain nothing; the
        // daemon's own last line on stderr does.
        throw new DaemonNotRunningError(`the compactd daemon exited during '${method}': ${await this.exitReason(err.message)}`);
      }
      if (err instanceof ResponseError) {
        const data = typeof err.data === "object" && err.data !== null ? (err.data as Record<string, unknown>) : {};
        throw new CompactdError(err.code, err.message, data);
      }
      if (!this.running) {
        throw new DaemonNotRunningError(`the compactd daemon exited during '${method}': ${await this.exitReason("no answer")}`);
      }
      throw err;
    } finally {
      link?.dispose();
      source.dispose();
    }
  }

  /** Why the daemon went away: its last stderr line once all of its output is in, or `fallback`. */
  private async exitReason(fallback: string): Promise<string> {
    if (this.outputClosed !== undefined) {
      await Promise.race([this.outputClosed, delay(OUTPUT_DRAIN_MS)]);
    }
    return this.lastErrorLine ?? fallback;
  }

  private tokens(sessionId: string, status: TokenStatus | null | undefined): void {
    if (status) {
      this.tokensEmitter.fire({ sessionId, status });
    }
  }

  // -- typed protocol methods ------------------------------------------------------------------

  /** `session/open`: open or create a session (or import a transcript with `transcriptPath`). */
  async openSession(params: OpenParams): Promise<OpenResult> {
    const result = await this.request("session/open", params);
    this.tokens(result.sessionId, result.status);
    return result;
  }

  /** `session/append`: append transcript entries (Claude Code JSONL shape). */
  async append(sessionId: string, entries: Array<Record<string, unknown>>): Promise<AppendResult> {
    const result = await this.request("session/append", { sessionId, entries });
    this.tokens(sessionId, result.status);
    return result;
  }

  /** `tokens/status`: how full the context window is. */
  async status(sessionId: string): Promise<TokenStatus> {
    const result = await this.request("tokens/status", { sessionId });
    this.tokens(sessionId, result);
    return result;
  }

  /** `tokens/breakdown`: where the tokens go, by category and tool. */
  breakdown(sessionId: string): Promise<BreakdownResult> {
    return this.request("tokens/breakdown", { sessionId });
  }

  /** `tokens/history`: the session's size per API response, and its compactions. */
  history(sessionId: string): Promise<HistoryResult> {
    return this.request("tokens/history", { sessionId });
  }

  /** `compact/preview`: what a compaction would do now (by default what `compact/auto` would). */
  preview(sessionId: string, mechanism: "micro" | "full" | "partial" | "auto" = "auto"): Promise<PreviewResult> {
    return this.request("compact/preview", { sessionId, mechanism });
  }

  /**
   * `claudeCode/compact`: compact a Claude Code transcript into a new Claude Code session beside
   * it (the original is only read); the result names the command that resumes it.
   */
  claudeCodeCompact(params: ClaudeCodeCompactParams, token?: CancellationLike): Promise<ClaudeCodeCompactResult> {
    return this.request("claudeCode/compact", params, token);
  }

  /**
   * `compact/full`: summarize the conversation now. Cancelling `token` sends `$/cancelRequest`;
   * the daemon then leaves the session as it was and the promise rejects with a
   * `CompactdError` whose `cancelled` is true.
   */
  async compactFull(sessionId: string, instructions?: string, token?: CancellationLike): Promise<CompactResult> {
    const params = instructions ? { sessionId, customInstructions: instructions } : { sessionId };
    const result = await this.request("compact/full", params, token);
    // The result has no status; ask for it so listeners see the freed space at once.
    await this.status(sessionId).catch(() => undefined);
    return result;
  }

  /** `compact/auto`: let the daemon decide whether and how to compact. */
  async compactAuto(sessionId: string, force = false, token?: CancellationLike): Promise<AutoResult> {
    const result = await this.request("compact/auto", force ? { sessionId, force } : { sessionId }, token);
    this.tokens(sessionId, result.status);
    return result;
  }

  /** `session/messages`: the API-ready view after the last boundary. */
  messages(sessionId: string): Promise<MessagesResult> {
    return this.request("session/messages", { sessionId });
  }

  /** `session/list`: the sessions the daemon knows. */
  listSessions(): Promise<ListResult> {
    return this.request("session/list", {});
  }

  /** `session/close`. */
  closeSession(sessionId: string): Promise<CloseResult> {
    return this.request("session/close", { sessionId });
  }

  // -- lifecycle ---------------------------------------------------------------------------

  /**
   * Shut the daemon down: `shutdown` then `exit`, wait up to `graceMs` for it to exit, kill it
   * otherwise. Resolves with how it ended (undefined if it never started). Safe to call twice.
   */
  async dispose(graceMs = DEFAULT_SHUTDOWN_GRACE_MS): Promise<ExitInfo | undefined> {
    const child = this.child;
    const exited = this.exited;
    if (child === undefined || exited === undefined) {
      this.disposeEmitters();
      return undefined;
    }
    this.disposing = true;
    if (this.running && this.connection !== undefined) {
      const connection = this.connection;
      const polite = (async () => {
        await connection.sendRequest("shutdown");
        await connection.sendNotification("exit");
      })().catch(() => undefined);
      await Promise.race([polite, delay(graceMs)]);
      // Closing stdin is the daemon's other way out (it exits on EOF).
      child.stdin?.end();
    }
    let timer: NodeJS.Timeout | undefined;
    const killed = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        child.kill("SIGKILL");
        resolve();
      }, graceMs);
    });
    await Promise.race([exited, killed]);
    const info = await exited;
    clearTimeout(timer);
    this.connection?.dispose();
    this.disposeEmitters();
    return info;
  }

  private disposeEmitters(): void {
    for (const emitter of [
      this.statusEmitter,
      this.thresholdEmitter,
      this.memoryEmitter,
      this.cacheBreakEmitter,
      this.followedEmitter,
      this.tokensEmitter,
      this.progressEmitter,
      this.exitEmitter,
    ]) {
      emitter.dispose();
    }
  }
}

interface InitializeResult {
  serverInfo?: { name?: string; version?: string };
  capabilities?: {
    experimental?: {
      compactd?: { protocolVersion?: string; methods?: string[]; notifications?: string[] };
    };
  };
}

/** The last non-blank line of `text`, trimmed; undefined when there is none. */
export function lastLine(text: string): string | undefined {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0);
  return lines[lines.length - 1];
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
