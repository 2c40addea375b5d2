/**
 * Test helpers: start the REAL daemon (`python -m compactd serve --data-dir <tmp>`) through the
 * client core, run the loopback Anthropic API emulator from `tests/emulator`, build small
 * conversations in Claude Code's transcript shape, and wait for events with a deadline. The
 * Python interpreter comes from `COMPACTD_PYTHON` (default: the repository's `.venv`).
 */

import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";

import { CompactdClient, type InitializationOptions, type TokenStatus } from "../src/core";

/** clients/vscode, whether running from out/test or test. */
/** A real directory to open sessions in: the daemon refuses a cwd that does not exist. */
export const PROJECT = os.tmpdir();
export const EXTENSION_DIR = path.resolve(__dirname, __dirname.includes(`${path.sep}out${path.sep}`) ? "../.." : "..");
export const REPO_ROOT = path.resolve(EXTENSION_DIR, "../..");
export const PYTHON = path.resolve(EXTENSION_DIR, process.env["COMPACTD_PYTHON"] || "../../.venv/bin/python");

export function tempDir(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `compactd-vscode-${prefix}-`));
}

export interface Daemon {
  client: CompactdClient;
  dataDir: string;
  /** Everything the daemon logged, for failure messages. */
  log(): string;
  /** Shut the daemon down and remove its data dir. */
  close(): Promise<void>;
}

export function daemonCommand(): string[] {
  return [PYTHON, "-m", "compactd", "serve"];
}

/** Spawn and initialize a daemon with its own temporary data dir. */
export async function startDaemon(options: InitializationOptions = {}): Promise<Daemon> {
  const dataDir = tempDir("data");
  let log = "";
  const client = new CompactdClient({
    command: daemonCommand(),
    dataDir,
    cwd: REPO_ROOT,
    onStderr: (text) => {
      log += text;
    },
  });
  await client.start();
  await client.initialize(options);
  return {
    client,
    dataDir,
    log: () => log,
    close: async () => {
      await client.dispose();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface Emulator {
  baseUrl: string;
  /** Queue replies (the emulator's `Reply` fields, e.g. `{delay: 5}`) for the next requests. */
  script(...replies: Array<Record<string, unknown>>): Promise<void>;
  /** The requests the emulator has answered or is answering. */
  requests(): Promise<Array<{ method: string; path: string; status: number | null }>>;
  /** Forget the script and the recorded requests. */
  reset(): Promise<void>;
  close(): Promise<void>;
}

/** Run `python -m tests.emulator --port 0` and read its base URL from the first line. */
export async function startEmulator(): Promise<Emulator> {
  const child: ChildProcess = spawn(PYTHON, ["-m", "tests.emulator", "--port", "0"], {
    cwd: REPO_ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (t: string) => {
    stderr += t;
  });
  const baseUrl = await withTimeout(
    new Promise<string>((resolve, reject) => {
      const lines = readline.createInterface({ input: child.stdout! });
      lines.once("line", (line) => resolve(line.trim()));
      child.once("exit", (code) => reject(new Error(`the emulator exited (${code}): ${stderr}`)));
    }),
    15_000,
    "the emulator did not print its base URL",
  );
  const control = async (name: string, body?: unknown): Promise<unknown> => {
    const response = await fetch(`${baseUrl}/_emulator/${name}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!response.ok) {
      throw new Error(`emulator control ${name}: HTTP ${response.status}`);
    }
    return response.json();
  };
  return {
    baseUrl,
    script: async (...replies) => {
      await control("script", { replies });
    },
    requests: async () => (await control("requests")) as Array<{ method: string; path: string; status: number | null }>,
    reset: async () => {
      await control("reset", {});
    },
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) {
        return;
      }
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGTERM");
      // A scripted delay keeps a handler thread asleep; do not wait for it.
      const timer = setTimeout(() => child.kill("SIGKILL"), 3_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * A deterministic conversation of `turns` user prompts, each answered with a Read and text. Entry
 * uuids count up from `firstEntry`: give later parts of one session a higher start, or the daemon
 * skips them as entries it already has.
 */
export function conversation(turns: number, sessionId = "node-test", wordsPerResult = 200, firstEntry = 0): Array<Record<string, unknown>> {
  const entries: Array<Record<string, unknown>> = [];
  let parent: string | null = null;
  let n = firstEntry;
  const base = Date.UTC(2026, 0, 2, 3, 4, 5);
  const add = (entry: Record<string, unknown>): void => {
    n += 1;
    const uuid = `00000000-0000-4000-8000-${n.toString().padStart(12, "0")}`;
    entries.push({
      parentUuid: parent,
      isSidechain: false,
      userType: "external",
      cwd: "/home/dev/project",
      sessionId,
      version: "2.1.330",
      ...entry,
      uuid,
      timestamp: new Date(base + n * 1_000).toISOString(),
    });
    parent = uuid;
  };
  const words = (count: number, seed: number): string => {
    const vocab = ["parser", "token", "window", "cache", "summary", "session", "daemon", "buffer", "frame", "retry"];
    return Array.from({ length: count }, (_, i) => vocab[(i * 7 + seed) % vocab.length]).join(" ");
  };
  for (let t = 0; t < turns; t++) {
    add({ type: "user", message: { role: "user", content: `Turn ${t}: please look at src/mod_${t}.py and fix the ${words(8, t)}.` } });
    const toolId = `toolu_${t.toString().padStart(6, "0")}`;
    const msgId = `msg_${t.toString().padStart(8, "0")}`;
    add({
      type: "assistant",
      message: {
        id: msgId,
        type: "message",
        role: "assistant",
        model: "claude-sonnet-4-5",
        content: [{ type: "tool_use", id: toolId, name: "Read", input: { file_path: `/home/dev/project/src/mod_${t}.py` } }],
        stop_reason: "tool_use",
      },
    });
    add({
      type: "user",
      message: { role: "user", content: [{ type: "tool_result", tool_use_id: toolId, content: words(wordsPerResult, t) }] },
    });
    add({
      type: "assistant",
      message: {
        id: `${msgId}_b`,
        type: "message",
        role: "assistant",
        model: "claude-sonnet-4-5",
        content: [{ type: "text", text: `Fixed src/mod_${t}.py: ${words(30, t + 3)}.` }],
        stop_reason: "end_turn",
      },
    });
  }
  return entries;
}

export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Poll `check` until it returns a value other than undefined, or fail after `ms`. */
export async function waitFor<T>(check: () => Promise<T | undefined> | T | undefined, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value !== undefined) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms} ms: ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** A Claude Code 2.1.330 session recorded in /home/dev/project (`/compact` with instructions). */
export const CC_FIXTURE = path.join(REPO_ROOT, "tests/data/transcripts/claude-code-2.1.330__r16_manual.jsonl");
export const CC_RECORDED_CWD = "/home/dev/project";
export const CC_FIXTURE_SESSION = "959f8b37-3e2e-416f-8620-5ef5ede9f42c";

/** The fixture as Claude Code would have written it in `project`. */
export function ccFixtureIn(project: string): string {
  return fs.readFileSync(CC_FIXTURE, "utf8").split(CC_RECORDED_CWD).join(project);
}

/** An assistant line as Claude Code appends it to a transcript, reporting `tokens` of usage. */
export function liveAnswer(n: number, tokens: number, sessionId: string, cwd: string): string {
  return (
    JSON.stringify({
      parentUuid: null,
      isSidechain: false,
      type: "assistant",
      uuid: `00000000-0000-4000-9000-${n.toString().padStart(12, "0")}`,
      timestamp: new Date(Date.UTC(2026, 10, 22, 12, 0, n)).toISOString(),
      sessionId,
      cwd,
      message: {
        id: `msg_live_${n}`,
        type: "message",
        role: "assistant",
        model: "claude-opus-5-5",
        content: [{ type: "text", text: `live answer ${n}` }],
        stop_reason: "end_turn",
        usage: { input_tokens: 10, cache_read_input_tokens: tokens - 20, cache_creation_input_tokens: 0, output_tokens: 10 },
      },
    }) + "\n"
  );
}

/** A token status of 61,234 tokens against Sonnet's 200K window, with `overrides`. */
export function tokenStatus(overrides: Partial<TokenStatus> = {}): TokenStatus {
  return {
    tokens: 61_234,
    exactTokens: 60_000,
    estimatedTokens: 1_234,
    contextWindow: 200_000,
    maxOutputTokens: 64_000,
    effectiveWindow: 180_000,
    autoCompactThreshold: 167_000,
    warningThreshold: 147_000,
    errorThreshold: 147_000,
    blockingLimit: 177_000,
    percentLeft: 63,
    isAboveWarningThreshold: false,
    isAboveErrorThreshold: false,
    isAboveAutoCompactThreshold: false,
    isAtBlockingLimit: false,
    autoCompactEnabled: true,
    compactionEnabled: true,
    circuitOpen: false,
    ...overrides,
  };
}
