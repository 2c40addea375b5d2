/**
 * Compaction on demand: `compactd.compact` and `compactd.compactWithInstructions` run
 * `compact/full` on the session on display behind a cancellable progress notification whose text
 * follows the compaction's phases (`compact/status`, worded by `format.ts`); Cancel sends
 * `$/cancelRequest` and the daemon leaves the conversation as it was. The outcome, freed tokens or
 * the cancellation, is a toast of its own.
 */

import * as vscode from "vscode";

import { CompactdError, type StatusNotification } from "./core";
import type { Daemon } from "./daemon";
import { compactionOutcome, progressUpdate } from "./format";
import type { ProgressView } from "./progress";
import type { Sessions } from "./sessions";
import type { Ui } from "./ui";

export class Compaction {
  constructor(
    private readonly ui: Ui,
    private readonly daemon: Daemon,
    private readonly sessions: Sessions,
    private readonly progressView: ProgressView,
  ) {}

  async compactWithInstructions(): Promise<void> {
    const instructions = await vscode.window.showInputBox({
      title: "Compact with instructions",
      prompt: "What should the summary focus on or keep?",
      placeHolder: "e.g. keep the exact error messages and the list of files changed",
      ignoreFocusOut: true,
    });
    if (instructions === undefined) {
      return;
    }
    await this.compact(instructions.trim() || undefined);
  }

  async compact(instructions: string | undefined): Promise<void> {
    const sessionId = await this.sessions.activeOrAsk();
    if (!sessionId) {
      return;
    }
    const client = await this.daemon.ensureClient();
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "compactd: compacting", cancellable: true },
      async (progress, token) => {
        let compactionId: string | undefined;
        let shown: string | undefined;
        const listener = client.onStatus((note: StatusNotification) => {
          // Only this session's manual compaction; an auto one may run for another session.
          if (note.sessionId !== sessionId || (compactionId !== undefined && note.compactionId !== compactionId)) {
            return;
          }
          compactionId ??= note.compactionId;
          const text = progressUpdate(note, shown);
          if (text !== undefined) {
            shown = text;
            progress.report({ message: text });
          }
        });
        // This notification shows the compaction: the daemon's own progress for it is not shown.
        const claim = this.progressView.claim();
        try {
          const result = await client.compactFull(sessionId, instructions, token);
          void vscode.window.showInformationMessage(compactionOutcome(result));
        } catch (err) {
          if (err instanceof CompactdError && err.cancelled) {
            void vscode.window.showInformationMessage("Compaction cancelled; the conversation is unchanged.");
          } else {
            this.ui.reportError("Compaction", err);
          }
        } finally {
          claim.dispose();
          listener.dispose();
        }
      },
    );
  }
}
