/**
 * The daemon's work-done progress (`window/workDoneProgress/create`, then `$/progress`) shown as
 * VS Code progress notifications: one per progress the daemon begins on this window's client, with
 * its title and messages, and a Cancel button that asks the daemon to cancel the operation
 * (`window/workDoneProgress/cancel`). A compaction another extension runs through the API's client
 * (`compact/auto`, `compact/partial`) shows this way. The compaction command shows its own
 * notification, worded from `compact/status`; while it runs, it claims the progress the daemon
 * begins for it, so that one compaction is never shown twice.
 */

import * as vscode from "vscode";

import type { CompactdClient, WorkDoneProgress } from "./core";
import type { Daemon } from "./daemon";

/** A claim on the next progress the daemon begins; dispose it when the request is answered. */
export interface Claim {
  dispose(): void;
}

export class ProgressView {
  /** Open claims, oldest first; a claim taken by a progress leaves the list. */
  private readonly claims: Array<{ taken: boolean }> = [];

  constructor(daemon: Daemon) {
    daemon.onClient({ attach: (client) => this.attach(client) });
  }

  private attach(client: CompactdClient): void {
    client.onWorkDoneProgress((progress) => {
      const claim = this.claims.shift();
      if (claim) {
        claim.taken = true;
        return;
      }
      void this.show(progress);
    });
  }

  /**
   * The next progress the daemon begins belongs to a request the caller already shows (sent just
   * before, on this client): it is not shown again. Progress is per client, so the only other
   * requests are those other extensions send through the API's client at the same moment.
   */
  claim(): Claim {
    const claim = { taken: false };
    this.claims.push(claim);
    return {
      dispose: () => {
        const at = this.claims.indexOf(claim);
        if (at >= 0) {
          this.claims.splice(at, 1);
        }
      },
    };
  }

  private show(progress: WorkDoneProgress): Thenable<void> {
    return vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `compactd: ${progress.title}`, cancellable: progress.cancellable },
      async (report, token) => {
        if (progress.message) {
          report.report({ message: progress.message });
        }
        const reports = progress.onReport((message) => {
          if (message) {
            report.report({ message });
          }
        });
        const cancel = token.onCancellationRequested(() => progress.cancel());
        try {
          await progress.done;
        } finally {
          reports.dispose();
          cancel.dispose();
        }
      },
    );
  }
}
