/**
 * The gauge: one status bar item that says how much of the context window the session on display
 * has left (coloured at the warning and error levels), or that the daemon is stopped or was not
 * found, or that no session is chosen. It follows every fresh token status of that session, and
 * warns once per level crossing (`tokens/threshold`) with a "Compact now" button; a warning that
 * no longer holds (a compaction freed the window) is taken back. Clicking it opens the context
 * panel.
 */

import * as vscode from "vscode";

import type { CompactdClient, TokenStatus } from "./core";
import type { Daemon } from "./daemon";
import { levelOf, statusBarText, statusTooltip, thresholdWarning } from "./format";
import type { Ui } from "./ui";

const STATUS_ICON = "$(fold)";

export class Gauge implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private sessionId: string | undefined;
  private status: TokenStatus | undefined;
  private daemon: Daemon | undefined;

  /** `compactNow`: what the warning's "Compact now" button runs. */
  constructor(
    private readonly ui: Ui,
    private readonly compactNow: () => void,
  ) {
    this.item = vscode.window.createStatusBarItem("compactd.context", vscode.StatusBarAlignment.Right, 100);
    this.item.name = "compactd context";
    this.render();
    this.item.show();
  }

  /** Follow `daemon`: its state and each client's token statuses and threshold crossings. */
  follow(daemon: Daemon): void {
    this.daemon = daemon;
    daemon.onClient({ attach: (client) => this.attach(client) });
    this.render();
  }

  private attach(client: CompactdClient): void {
    client.onTokens(({ sessionId, status }) => {
      if (sessionId === this.sessionId) {
        this.status = status;
        this.render();
        if (this.ui.notices.textOf("threshold") !== thresholdWarning(status)) {
          // The level dropped (a compaction) or changed: the warning on screen no longer holds.
          void this.ui.notices.withdraw("threshold");
        }
      }
    });
    client.onCompactStatus((note) => {
      // A background preparation started, finished or failed: the tooltip says whether a summary
      // is ready, so the status is asked for again (the count itself did not change).
      if (note.background && note.sessionId === this.sessionId && ["preparing", "prepared", "failed"].includes(note.phase)) {
        void client.tokensStatus({ sessionId: note.sessionId }).catch(() => undefined);
      }
    });
    client.onTokensThreshold((note) => {
      // One append can cross several levels at once: warn for the highest one only.
      const highest = note.level === "blocking" || (note.level === "error" && !note.status.isAtBlockingLimit);
      const warning = thresholdWarning(note.status);
      if (note.sessionId === this.sessionId && highest && warning) {
        void this.ui.notices.show("threshold", "warning", warning, ["Compact now"]).then((choice) => {
          if (choice) {
            this.compactNow();
          }
        });
      }
    });
  }

  /** Show `sessionId` at `status` (the session on display changed or was re-opened). */
  async show(sessionId: string, status: TokenStatus): Promise<void> {
    if (sessionId !== this.sessionId) {
      await this.ui.notices.withdraw("threshold"); // it was about the other session
    }
    this.sessionId = sessionId;
    this.status = status;
  }

  render(): void {
    const item = this.item;
    const state = this.daemon?.state ?? "stopped";
    if (state === "stopped" || state === "not found") {
      item.text = `${STATUS_ICON} compactd: ${state}`;
      item.tooltip =
        state === "not found"
          ? "No compactd daemon was found. Click to look again and for the ways to set one up."
          : "The compactd daemon is not running. Click to start it.";
      item.command = "compactd.restart";
      item.backgroundColor = undefined;
      return;
    }
    if (!this.sessionId || !this.status) {
      item.text = `${STATUS_ICON} compactd`;
      item.tooltip = "No session selected. Click to choose one.";
      item.command = "compactd.selectSession";
      item.backgroundColor = undefined;
      return;
    }
    const status = this.status;
    item.text = `${STATUS_ICON} ${statusBarText(status)}`;
    item.tooltip = statusTooltip(status, this.sessionId);
    item.command = "compactd.showContext";
    const level = levelOf(status);
    item.backgroundColor =
      level === "ok" ? undefined : new vscode.ThemeColor(`statusBarItem.${level === "error" ? "error" : "warning"}Background`);
  }

  dispose(): void {
    this.item.dispose();
  }
}
