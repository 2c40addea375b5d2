/**
 * "Install into Claude Code for this workspace" (`compactd.installClaudeCode`): runs
 * `compactd claude-code install --scope project` in the workspace folder with the compactd the
 * extension finds for its daemon (`locate.ts`: the setting, PATH, then the Python extension's
 * interpreter from `interpreter.ts`). That installs compactd's Claude Code plugin for the project
 * (its compaction, hooks and recall MCP server, copied into .claude/compactd-plugin and named by
 * a relative path), through Claude Code's own plugin commands when `claude` is on PATH, with the
 * status line (docs/claude-code.md#install); the output channel shows what changed, and a notice
 * says how to take it out again.
 */

import { execFile } from "node:child_process";
import * as vscode from "vscode";

import { selectedInterpreter } from "./interpreter";
import { locateServer } from "./locate";
import { settings, workspaceDir, type Ui } from "./ui";

/** The command line that installs into `workspace`, from the daemon's (its `serve` dropped). */
export function installCommand(serve: readonly string[], workspace: string): string[] {
  const base = serve[serve.length - 1] === "serve" ? serve.slice(0, -1) : [...serve];
  return [...base, "claude-code", "install", "--scope", "project", "--project", workspace];
}

export interface InstallOutcome {
  ok: boolean;
  /** What the command printed (stdout, then stderr). */
  output: string;
}

/** Run the install command; never rejects (a failure is `ok: false` with what it said). */
export function runInstall(command: readonly string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<InstallOutcome> {
  const [file, ...args] = command as [string, ...string[]];
  return new Promise((resolve) => {
    execFile(file, args, { cwd, env, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ ok: err === null, output: `${stdout}${stderr}`.trim() || (err ? err.message : "") });
    });
  });
}

export class ClaudeCodeInstall {
  constructor(private readonly ui: Ui) {}

  async run(): Promise<void> {
    const located = await locateServer({
      setting: settings().get<string[]>("serverCommand"),
      cwd: workspaceDir(),
      interpreter: selectedInterpreter,
      log: (line) => this.ui.output.appendLine(line),
    });
    if (!located) {
      throw new Error(
        "compactd was not found: it is not on PATH and the selected Python interpreter does not have it. " +
          "Select an interpreter with compactd installed, or set compactd.serverCommand.",
      );
    }
    const command = installCommand(located.command, workspaceDir());
    this.ui.output.appendLine(`$ ${command.join(" ")}`);
    const outcome = await runInstall(command, workspaceDir());
    this.ui.output.appendLine(outcome.output);
    if (!outcome.ok) {
      throw new Error(outcome.output.split("\n").pop() ?? "the install command failed");
    }
    void vscode.window.showInformationMessage(
      "compactd's plugin is installed into Claude Code for this workspace (its compaction, hooks, status line, the recall MCP server). " +
        "Take it out with: compactd claude-code uninstall --scope project",
    );
  }
}
