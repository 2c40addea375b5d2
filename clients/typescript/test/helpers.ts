/**
 * Test helpers: the REAL daemon (`python -m compactd serve`, the interpreter from
 * `COMPACTD_PYTHON`, default the repository's `.venv`), each on its own temporary data dir, and
 * small conversations in Claude Code's transcript shape.
 */

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

import { CompactdClient, type InitializationOptions } from "../src";

/** clients/typescript, whether running from out/test or test. */
export const PACKAGE_DIR = path.resolve(__dirname, __dirname.includes(`${path.sep}out${path.sep}`) ? "../.." : "..");
export const PYTHON = path.resolve(PACKAGE_DIR, process.env["COMPACTD_PYTHON"] || "../../.venv/bin/python");

export function tempDir(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `compactd-ts-${prefix}-`));
}

/** Spawn and initialize a daemon with its own data dir; `close()` shuts it down and removes it. */
export async function startDaemon(options: InitializationOptions = {}): Promise<{ client: CompactdClient; close(): Promise<void> }> {
  const dataDir = tempDir("data");
  const client = await CompactdClient.spawn({
    command: [PYTHON, "-m", "compactd", "serve"],
    dataDir,
    initializationOptions: options,
  });
  return {
    client,
    close: async () => {
      await client.dispose();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** `turns` rounds of a user asking, the assistant reading a file, and its answer. */
export function conversation(turns: number, words = 200): Array<Record<string, unknown>> {
  const entries: Array<Record<string, unknown>> = [];
  let parent: string | null = null;
  const base = Date.UTC(2026, 0, 2, 3, 4, 5);
  const add = (entry: Record<string, unknown>): void => {
    const uuid = `00000000-0000-4000-8000-${(entries.length + 1).toString().padStart(12, "0")}`;
    entries.push({ parentUuid: parent, ...entry, uuid, timestamp: new Date(base + entries.length * 1_000).toISOString() });
    parent = uuid;
  };
  const text = (n: number, seed: number): string =>
    Array.from({ length: n }, (_, i) => ["parser", "token", "window", "cache", "summary"][(i + seed) % 5]).join(" ");
  for (let t = 0; t < turns; t++) {
    const toolId = `toolu_${t}`;
    add({ type: "user", message: { role: "user", content: `Turn ${t}: fix src/mod_${t}.py` } });
    add({
      type: "assistant",
      message: { id: `msg_${t}a`, role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "tool_use", id: toolId, name: "Read", input: { file_path: `/p/src/mod_${t}.py` } }] },
    });
    add({ type: "user", message: { role: "user", content: [{ type: "tool_result", tool_use_id: toolId, content: text(words, t) }] } });
    add({ type: "assistant", message: { id: `msg_${t}b`, role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: `Fixed mod_${t}.` }] } });
  }
  return entries;
}
