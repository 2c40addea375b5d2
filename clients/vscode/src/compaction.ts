/**
 * Compaction on demand: `compactd.compact` and `compactd.compactWithInstructions` run
 * `compact/full` on the session on display behind a cancellable progress notification whose text
 * follows the compaction's phases (`compact/status`, worded by `format.ts`); Cancel sends
 * `$/cancelRequest` and the daemon leaves the conversation as it was. The outcome, freed tokens or
 * the cancellation, is a toast of its own.
 *
 * A session the daemon follows refuses writes (docs/follow.md#writes): compactd's copy only
 * mirrors the transcript Claude Code writes, so a compaction there would never reach Claude Code.
 * On such a session the command says so and offers "Compact and resume in Claude Code" instead; on
 * a session shown read-only (another window's daemon owns it) it says where to compact it.
 */

import * as vscode from "vscode";

import { CompactdError, type StatusNotification } from "./core";
import type { Daemon } from "./daemon";
import { compactionOutcome, followedRefusal, progressUpdate, writeRefusal } from "./format";
import type { ProgressView } from "./progress";
import type { Sessions } from "./sessions";
import type { Ui } from "./ui";

/** The button that runs "Compact and resume in Claude Code" from the refusal on a followed session. */
export const RESUME_INSTEAD = "Compact and resume in Claude Code";

export class Compaction {
  /** "Compact and resume in Claude Code", offered on a followed session (set by the glue). */
  resumeInstead: () => Promise<void> = async () => undefined;

  constructor(
    private readonly ui: Ui,
    private readonly daemon: Daemon,
    private readonly sessions: Sessions,
    private readonly progressView: ProgressView,
  ) {}

  async compactWithInstructions(): Promise<void> {
    const sessionId = await this.sessions.activeOrAsk();
    if (!sessionId || (await this.refused(sessionId))) {
      return;
    }
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
    if (!sessionId || (await this.refused(sessionId))) {
      return;
    }
    const client = await this.daemon.ensureClient();
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "compactd: compacting", cancellable: true },
      async (progress, token) => {
        let compactionId: string | undefined;
        let shown: string | undefined;
        const listener = client.onCompactStatus((note: StatusNotification) => {
          // Only this session's manual compaction; an auto one may run for another session, and a
          // background preparation (`background: true`) is no compaction the user waits for.
          if (note.background || note.sessionId !== sessionId || (compactionId !== undefined && note.compactionId !== compactionId)) {
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
          const result = await client.compactFull({ sessionId, ...(instructions ? { customInstructions: instructions } : {}) }, { token });
          void vscode.window.showInformationMessage(compactionOutcome(result));
        } catch (err) {
          if (err instanceof CompactdError && err.cancelled) {
            void vscode.window.showInformationMessage("Compaction cancelled; the conversation is unchanged.");
          } else if (err instanceof CompactdError && err.dataCode === "sessionFollowed") {
            // The daemon follows it after all (the display was behind): the same offer.
            void this.offerResume(sessionId);
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

  /** True when the session on display cannot be compacted here; the person was told why. */
  private async refused(sessionId: string): Promise<boolean> {
    if (this.sessions.following) {
      await this.offerResume(sessionId);
      return true;
    }
    if (this.sessions.readOnly) {
      const text = writeRefusal("sessionReadOnly", { sessionId }) ?? "";
      this.ui.output.appendLine(text);
      void vscode.window.showWarningMessage(text);
      return true;
    }
    return false;
  }

  private async offerResume(sessionId: string): Promise<void> {
    const text = followedRefusal(sessionId);
    this.ui.output.appendLine(text);
    if ((await vscode.window.showWarningMessage(text, RESUME_INSTEAD)) === RESUME_INSTEAD) {
      await this.ui.withErrors("Compact and resume", () => this.resumeInstead());
    }
  }
}
