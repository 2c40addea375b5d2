/**
 * "Compact and resume in Claude Code" (`compactd.compactAndResume`): `claudeCode/compact` on the
 * Claude Code transcript on display (the followed one, else the one the session was imported
 * from, else one the person picks among the workspace's), which writes the compaction as a NEW
 * Claude Code session beside the original and leaves the original as it was
 * (docs/claude-code.md); then a terminal in the project's folder runs the command that resumes
 * it (`claude --resume <id>`), and the extension follows the new session. The notice says what
 * happened in figures; an error says what to do about it.
 */

import * as fs from "node:fs";
import * as os from "node:os";
import * as vscode from "vscode";

import { CompactdError, type ClaudeCodeCompactResult } from "./core";
import type { Daemon } from "./daemon";
import type { Follow } from "./follow";
import { groupDigits } from "./format";
import type { Sessions } from "./sessions";
import { sessionIdFor, workspaceTranscripts } from "./transcripts";
import { settings, workspaceDir, ReportedError, type Ui } from "./ui";

/** The terminal the resumed session runs in. */
export const TERMINAL_NAME = "Claude Code (compactd)";

/** The notice after a compaction: what was written, the figures, what runs in the terminal. */
export function resumeNotice(r: ClaudeCodeCompactResult): string {
  return (
    `Compacted the Claude Code session into a new one, ${r.newSessionId}: ` +
    `${groupDigits(r.preTokens)} → ${groupDigits(r.postTokens)} tokens, ` +
    `${r.userMessagesKept} of ${r.userMessages} of your messages quoted, the last turn kept. ` +
    `The original is unchanged. Resuming it in the terminal "${TERMINAL_NAME}".`
  );
}

/** What a person can do about a failed `claudeCode/compact`, by the daemon's error code. */
export function resumeError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof CompactdError) {
    switch (err.dataCode) {
      case "notEnoughMessages":
        return `Nothing to compact yet: ${message}. Let Claude Code answer at least once, then try again.`;
      case "transcriptUnreadable":
        return `compactd cannot use this transcript: ${message}. Pick another one with "compactd: Select session…".`;
      case "invalidParams":
        return `${message}. For an online summary the daemon needs ANTHROPIC_API_KEY in its environment; or turn compactd.compactAndResume.online off.`;
      case "compacting":
        return `${message}. Wait for the running compaction to finish, then try again.`;
    }
  }
  return message;
}

export class Resume {
  constructor(
    private readonly ui: Ui,
    private readonly daemon: Daemon,
    private readonly sessions: Sessions,
    private readonly follow: Follow,
  ) {}

  /** The Claude Code transcript to compact; asks the person when none is on display. */
  private async transcript(): Promise<string | undefined> {
    const known = this.follow.transcript ?? this.sessions.importedFrom;
    if (known) return known;
    const found = await workspaceTranscripts(os.homedir(), workspaceDir());
    if (found.length === 0) {
      throw new Error(
        `no Claude Code session was found for ${workspaceDir()} (Claude Code keeps them in ~/.claude/projects, or under CLAUDE_CONFIG_DIR). Start claude in this folder first.`,
      );
    }
    const choice = await vscode.window.showQuickPick(
      found.map((t) => ({ label: sessionIdFor(t.file), description: t.modified.toLocaleString(), detail: t.file, file: t.file })),
      { placeHolder: "Claude Code session to compact and resume" },
    );
    return choice?.file;
  }

  async run(): Promise<void> {
    const transcriptPath = await this.transcript();
    if (!transcriptPath) return;
    const client = await this.daemon.ensureClient();
    const online = settings().get<boolean>("compactAndResume.online") === true;
    let result: ClaudeCodeCompactResult;
    try {
      result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: "compactd: compacting the Claude Code session", cancellable: true },
        (_progress, token) => client.claudeCodeCompact({ transcriptPath, ...(online ? { online } : {}) }, { token }),
      );
    } catch (err) {
      if (err instanceof CompactdError && err.cancelled) {
        void vscode.window.showInformationMessage("Cancelled; no new session was written.");
        return;
      }
      this.ui.output.appendLine(`Compact and resume failed: ${err instanceof Error ? err.message : String(err)}`);
      void vscode.window.showErrorMessage(`Compact and resume failed: ${resumeError(err)}`, "Show log").then((c) => c && this.ui.output.show());
      throw new ReportedError(err);
    }
    for (const warning of result.warnings ?? []) this.ui.output.appendLine(`compact and resume: ${warning}`);
    this.ui.output.appendLine(`compacted ${result.originalTranscriptPath} into ${result.newTranscriptPath}; running: ${result.resumeCommand}`);
    // The session's own folder, where Claude Code looks for it; the workspace when that is gone.
    const cwd = result.cwd && fs.existsSync(result.cwd) ? result.cwd : workspaceDir();
    const terminal = vscode.window.createTerminal({ name: TERMINAL_NAME, cwd });
    terminal.show();
    terminal.sendText(result.resumeCommand, true);
    void vscode.window.showInformationMessage(resumeNotice(result));
    // Claude Code goes on in the new session: the gauge follows it there.
    if (this.follow.enabled) {
      await this.follow.switchTo(result.newTranscriptPath, "the session compactd compacted and Claude Code resumes");
    }
  }
}
