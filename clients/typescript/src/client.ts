/**
 * The connection to one compactd daemon: it spawns `compactd serve` (or attaches to the streams of
 * a daemon started elsewhere), speaks JSON-RPC 2.0 with LSP framing through vscode-jsonrpc, runs
 * the LSP lifecycle (`initialize` / `initialized`, `shutdown` / `exit`), and carries the typed
 * methods and subscriptions generated from the protocol (`methods.ts`). A request is cancelled
 * through an `AbortSignal` (or a VS Code-style token), which sends `$/cancelRequest`; an error
 * answer becomes a `CompactdError` carrying `error.data.code`; a daemon that went away turns every
 * pending and later request into a `DaemonNotRunningError` quoting its last line on stderr.
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
  type MessageConnection,
} from "vscode-jsonrpc/node";

import { CompactdError, DaemonNotRunningError } from "./errors";
import { ProtocolMethods } from "./methods";
import { WorkDoneProgress, type WorkDoneProgressValue } from "./progress";
import { NOTIFICATION_TYPES, PROTOCOL_VERSION, type InitializationOptions, type Methods, type Notifications } from "./protocol";
import type { Disposable, Event, RequestOptions } from "./types";

/** What `compactd serve` is started with when nothing is configured: the console script on PATH. */
export const DEFAULT_SERVER_COMMAND: readonly string[] = ["compactd", "serve"];

/**
 * How long `dispose()` waits for the daemon to answer `shutdown` and exit before killing it.
 * The daemon closes its sessions (flushes transcripts) on exit, which takes milliseconds; a few
 * seconds leaves room for a slow disk without letting a hung daemon block its parent's exit.
 */
export const DEFAULT_SHUTDOWN_GRACE_MS = 5_000;

/** How many lines of the daemon's stderr are kept to explain an unexpected exit. */
const STDERR_TAIL_LINES = 50;

/**
 * How long a failed request waits for the rest of a dying daemon's stderr, to quote its last line.
 * The pipes close right after the process exits; this only bounds a child that keeps them open.
 */
const OUTPUT_DRAIN_MS = 1_000;

/** LSP's work-done progress methods (the daemon creates, the client may cancel). */
const PROGRESS_CREATE = "window/workDoneProgress/create";
const PROGRESS_CANCEL = "window/workDoneProgress/cancel";
const WORK_DONE = new ProgressType<WorkDoneProgressValue>();

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
  /** The name sent as `clientInfo.name` in `initialize`. */
  clientName?: string;
}

/** The streams of a daemon started elsewhere: its stdout to read, its stdin to write. */
export interface DaemonStreams {
  reader: NodeJS.ReadableStream;
  writer: NodeJS.WritableStream;
}

/** How the daemon process ended. */
export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** True when `dispose()` asked for it; false for a crash or a kill from outside. */
  expected: boolean;
}

/** What the daemon says about itself in its `initialize` result. */
export interface ServerDescription {
  name: string;
  version: string;
  protocolVersion: string;
  methods: string[];
  notifications: string[];
}

interface InitializeResult {
  serverInfo?: { name?: string; version?: string };
  capabilities?: {
    experimental?: {
      compactd?: { protocolVersion?: string; methods?: string[]; notifications?: string[] };
    };
  };
}

/**
 * One daemon and the connection to it. `CompactdClient.spawn()` starts and initializes one;
 * `CompactdClient.attach()` initializes one started elsewhere; `dispose()` shuts it down politely
 * (shutdown + exit) and waits for the process, killing it if it hangs.
 */
export class CompactdClient extends ProtocolMethods {
  private readonly options: ClientOptions;
  private child: ChildProcess | undefined;
  private connection: MessageConnection | undefined;
  private closed = false;
  private exited: Promise<ExitInfo> | undefined;
  /** Settles once the daemon's stdout and stderr are closed: all of its log has been read. */
  private outputClosed: Promise<void> | undefined;
  private disposing = false;
  private stderrTail: string[] = [];
  private described: ServerDescription | undefined;
  private readonly notificationEmitters = new Map<string, Emitter<unknown>>();
  private readonly progressEmitter = new Emitter<WorkDoneProgress>();
  private readonly exitEmitter = new Emitter<ExitInfo>();
  /** Work-done progresses the daemon created and has not ended, by token. */
  private readonly progresses = new Map<string | number, { listener: Disposable; begun?: WorkDoneProgress }>();

  /** The daemon began a work-done progress (a compaction this client asked for, say). */
  readonly onWorkDoneProgress: Event<WorkDoneProgress> = (listener) => this.progressEmitter.event(listener);
  /** The daemon process ended (spawned daemons only). */
  readonly onExit: Event<ExitInfo> = (listener) => this.exitEmitter.event(listener);

  constructor(options: ClientOptions = {}) {
    super();
    this.options = options;
  }

  /** Spawn the daemon and initialize it; on failure nothing is left running. */
  static async spawn(options: ClientOptions & { initializationOptions?: InitializationOptions } = {}): Promise<CompactdClient> {
    const client = new CompactdClient(options);
    await client.start();
    try {
      await client.initialize(options.initializationOptions);
    } catch (err) {
      await client.dispose(OUTPUT_DRAIN_MS);
      throw err;
    }
    return client;
  }

  /** Initialize a daemon started elsewhere, over its stdout (`reader`) and stdin (`writer`). */
  static async attach(
    streams: DaemonStreams,
    options: Omit<ClientOptions, "command" | "dataDir" | "env" | "cwd" | "onStderr"> & { initializationOptions?: InitializationOptions } = {},
  ): Promise<CompactdClient> {
    const client = new CompactdClient(options);
    client.connect(streams);
    await client.initialize(options.initializationOptions);
    return client;
  }

  /** The daemon's name, version and method list, known after `initialize()`. */
  get server(): ServerDescription | undefined {
    return this.described;
  }

  /** True while the connection is open (and, for a spawned daemon, its process runs). */
  get running(): boolean {
    if (this.connection === undefined || this.closed) {
      return false;
    }
    return this.child === undefined || (this.child.exitCode === null && this.child.signalCode === null);
  }

  /** The process id of a spawned daemon, while it runs. */
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
    if (this.child !== undefined || this.connection !== undefined) {
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
    this.connect({ reader: child.stdout!, writer: child.stdin! });
  }

  /** Connect to a daemon's streams (what `start()` does with the child's stdio). */
  private connect(streams: DaemonStreams): void {
    if (this.connection !== undefined) {
      throw new Error("this client is already connected");
    }
    const connection = createMessageConnection(
      new StreamMessageReader(streams.reader),
      new StreamMessageWriter(streams.writer),
    );
    this.connection = connection;
    connection.onClose(() => {
      this.closed = true;
      this.endProgresses();
    });
    for (const method of Object.keys(NOTIFICATION_TYPES)) {
      connection.onNotification(method, (params: unknown) => this.emitter(method).fire(params));
    }
    connection.onRequest(PROGRESS_CREATE, (params: { token: string | number }) => {
      this.trackProgress(connection, params.token);
      return null;
    });
    connection.listen();
  }

  private onStderrData(text: string): void {
    this.options.onStderr?.(text);
    this.stderrTail.push(...text.split(/(?<=\n)/));
    if (this.stderrTail.length > STDERR_TAIL_LINES) {
      this.stderrTail = this.stderrTail.slice(-STDERR_TAIL_LINES);
    }
  }

  private emitter(method: string): Emitter<unknown> {
    let emitter = this.notificationEmitters.get(method);
    if (emitter === undefined) {
      emitter = new Emitter<unknown>();
      this.notificationEmitters.set(method, emitter);
    }
    return emitter;
  }

  /** Call `listener` with each notification `method` (subscribing before `start()` is fine). */
  listen<N extends keyof Notifications>(method: N, listener: (params: Notifications[N]) => void): Disposable {
    return this.emitter(method).event((params) => listener(params as Notifications[N]));
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

  /**
   * `initialize` + `initialized`, with `initializationOptions`. The client asks for work-done
   * progress (`onWorkDoneProgress`). Rejects when the daemon speaks another protocol version.
   */
  async initialize(options: InitializationOptions = {}): Promise<ServerDescription> {
    const result = await this.send<InitializeResult>("initialize", {
      processId: process.pid,
      rootUri: null,
      capabilities: { window: { workDoneProgress: true } },
      initializationOptions: options,
      clientInfo: { name: this.options.clientName ?? "compactd-typescript-client" },
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

  /** Any request of the protocol, typed by its name. */
  request<M extends keyof Methods>(method: M, params: Methods[M]["params"], options?: RequestOptions): Promise<Methods[M]["result"]> {
    return this.send<Methods[M]["result"]>(method, params, options);
  }

  private connectionOrThrow(): MessageConnection {
    if (this.connection === undefined || !this.running) {
      const tail = this.stderr.trim();
      throw new DaemonNotRunningError("the compactd daemon is not running" + (tail ? `; its last words:\n${tail}` : ""));
    }
    return this.connection;
  }

  private async send<R>(method: string, params: unknown, options: RequestOptions = {}): Promise<R> {
    const connection = this.connectionOrThrow();
    // Whatever cancels the request (a signal, a token) cancels this vscode-jsonrpc token, which
    // sends `$/cancelRequest` for exactly this request's id.
    const source = new CancellationTokenSource();
    const cancel = (): void => source.cancel();
    const link = options.token?.onCancellationRequested(cancel);
    options.signal?.addEventListener("abort", cancel, { once: true });
    if (options.token?.isCancellationRequested || options.signal?.aborted) {
      source.cancel();
    }
    try {
      return await connection.sendRequest<R>(method, params, source.token);
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
      options.signal?.removeEventListener("abort", cancel);
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

  /**
   * Shut the daemon down: `shutdown` then `exit`, wait up to `graceMs` for it to exit, kill it
   * otherwise. Resolves with how a spawned daemon ended (undefined if it never started, or for an
   * attached one). Safe to call twice.
   */
  async dispose(graceMs = DEFAULT_SHUTDOWN_GRACE_MS): Promise<ExitInfo | undefined> {
    const child = this.child;
    const exited = this.exited;
    this.disposing = true;
    if (this.running && this.connection !== undefined) {
      const connection = this.connection;
      const polite = (async () => {
        await connection.sendRequest("shutdown");
        await connection.sendNotification("exit");
      })().catch(() => undefined);
      await Promise.race([polite, delay(graceMs)]);
      // Closing stdin is the daemon's other way out (it exits on EOF).
      child?.stdin?.end();
    }
    if (child === undefined || exited === undefined) {
      this.closeConnection();
      return undefined;
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
    this.closeConnection();
    return info;
  }

  /** `dispose()` under the name the LSP lifecycle gives it. */
  shutdown(graceMs = DEFAULT_SHUTDOWN_GRACE_MS): Promise<ExitInfo | undefined> {
    return this.dispose(graceMs);
  }

  private closeConnection(): void {
    this.closed = true;
    this.connection?.dispose();
    this.disposeEmitters();
  }

  private disposeEmitters(): void {
    for (const emitter of [...this.notificationEmitters.values(), this.progressEmitter, this.exitEmitter]) {
      emitter.dispose();
    }
    this.notificationEmitters.clear();
  }
}

/** The last non-blank line of `text`, trimmed; undefined when there is none. */
export function lastLine(text: string): string | undefined {
  const lines = text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  return lines[lines.length - 1];
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
