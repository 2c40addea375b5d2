/**
 * Where Claude Code keeps the transcripts of a workspace, so the extension can offer them for
 * import: `<config dir>/projects/<slug>/<session id>.jsonl`. The slug is the working directory
 * with every character other than an ASCII letter or digit turned into '-'. The config dir is
 * `$CLAUDE_CONFIG_DIR` (a comma-separated list is accepted), `~/.claude` (`%USERPROFILE%\.claude`
 * on Windows), or the XDG one newer releases use (`~/.config/claude`); the per-user application
 * folders of Windows (`%APPDATA%\Claude`) and macOS (`~/Library/Application Support/Claude`) are
 * searched too. The path arithmetic is pure; `workspaceTranscripts` does the I/O.
 */

import * as fs from "node:fs/promises";
import * as path from "node:path";

export interface Transcript {
  file: string;
  modified: Date;
}

/** The Claude Code configuration folders to search, most specific first, without repeats. */
export function claudeConfigDirs(home: string, env: NodeJS.ProcessEnv = process.env, platform: NodeJS.Platform = process.platform): string[] {
  const p = platform === "win32" ? path.win32 : path.posix;
  const dirs = (env["CLAUDE_CONFIG_DIR"] ?? "")
    .split(",")
    .map((d) => d.trim())
    .filter((d) => d.length > 0);
  dirs.push(p.join(home, ".claude"));
  dirs.push(p.join(env["XDG_CONFIG_HOME"] || p.join(home, ".config"), "claude"));
  if (platform === "win32" && env["APPDATA"]) {
    dirs.push(p.join(env["APPDATA"], "Claude"));
  }
  if (platform === "darwin") {
    dirs.push(p.join(home, "Library", "Application Support", "Claude"));
  }
  return [...new Set(dirs)];
}

/** Claude Code's folder name for sessions started in `cwd`. */
export function projectSlug(cwd: string): string {
  return cwd.replace(/[^A-Za-z0-9]/g, "-");
}

/**
 * The spellings of one working directory Claude Code may have recorded: VS Code reports Windows
 * drive letters in lower case (`c:\src`), a shell in upper case (`C:\src`).
 */
function cwdSpellings(cwd: string, platform: NodeJS.Platform): string[] {
  const spellings = [cwd];
  if (platform === "win32" && /^[a-zA-Z]:/.test(cwd)) {
    spellings.push(cwd[0]!.toUpperCase() + cwd.slice(1), cwd[0]!.toLowerCase() + cwd.slice(1));
  }
  return spellings;
}

/** Every folder that may hold the transcripts of sessions started in one of `cwds`. */
export function claudeProjectDirs(
  home: string,
  cwds: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
): string[] {
  const p = platform === "win32" ? path.win32 : path.posix;
  const slugs = [...new Set(cwds.flatMap((cwd) => cwdSpellings(cwd, platform)).map(projectSlug))];
  const dirs = claudeConfigDirs(home, env, platform).flatMap((config) => slugs.map((slug) => p.join(config, "projects", slug)));
  return [...new Set(dirs)];
}

/**
 * The workspace's transcripts, newest first: those under every candidate folder, for the folder
 * as VS Code names it and as the file system resolves it (a shell started in a symlinked folder,
 * or macOS's /var -> /private/var, records the resolved path). A file reached twice counts once.
 */
export async function workspaceTranscripts(home: string, cwd: string, limit = 20, env: NodeJS.ProcessEnv = process.env): Promise<Transcript[]> {
  const cwds = [cwd];
  const real = await fs.realpath(cwd).catch(() => undefined);
  if (real && real !== cwd) {
    cwds.push(real);
  }
  const found = new Map<string, Transcript>();
  for (const dir of claudeProjectDirs(home, cwds, env)) {
    let names: string[];
    try {
      names = (await fs.readdir(dir)).filter((n) => n.endsWith(".jsonl"));
    } catch {
      continue; // no Claude Code history there
    }
    for (const name of names) {
      const file = path.join(dir, name);
      try {
        const key = await fs.realpath(file);
        if (!found.has(key)) {
          found.set(key, { file, modified: (await fs.stat(file)).mtime });
        }
      } catch {
        // removed while we looked
      }
    }
  }
  return [...found.values()].sort((a, b) => b.modified.getTime() - a.modified.getTime()).slice(0, limit);
}

/** A transcript's Claude Code session id (its file name), made safe for compactd's id rules. */
export function sessionIdFor(transcript: string): string {
  return path.basename(transcript, ".jsonl").replace(/[^A-Za-z0-9._-]/g, "-");
}
