/**
 * Where Claude Code keeps the transcripts of a workspace, so the extension can offer them for
 * import: `<config dir>/projects/<slug>/<session id>.jsonl`, where the config dir is
 * `$CLAUDE_CONFIG_DIR` or `~/.claude` and the slug is the working directory with every character
 * other than an ASCII letter or digit turned into '-'. Pure path arithmetic, no I/O.
 */

import * as path from "node:path";

/** The folder holding the Claude Code transcripts of sessions started in `cwd`. */
export function claudeProjectDir(home: string, cwd: string, env: NodeJS.ProcessEnv = process.env): string {
  const configDir = env["CLAUDE_CONFIG_DIR"] || path.join(home, ".claude");
  return path.join(configDir, "projects", cwd.replace(/[^A-Za-z0-9]/g, "-"));
}
