/**
 * Toasts that can go stale: "starting compactd failed" once the daemon connects, a threshold
 * warning once a compaction has freed the window. Each kind of notice has a key, and a key has at
 * most one notice open: a new one replaces the old one instead of stacking on it, and the same
 * text is not shown twice. VS Code offers no call that closes one notification, so withdrawing a
 * notice that is still open hides the toasts on screen (`notifications.hideToasts`; they stay in
 * the notification centre). It is only done when one of ours is open.
 */

import * as vscode from "vscode";

export type NoticeKey = "start" | "threshold";

/** VS Code's command that hides the visible toasts (the Escape key on a toast does the same). */
const HIDE_TOASTS = "notifications.hideToasts";

interface Open {
  text: string;
}

export class Notices {
  private readonly open = new Map<NoticeKey, Open>();

  /** The text of the notice open under `key`, if any (for tests and the log). */
  textOf(key: NoticeKey): string | undefined {
    return this.open.get(key)?.text;
  }

  /**
   * Show `text` under `key` with `buttons`; resolves with the button pressed. Undefined when the
   * toast was closed, or when the same text is already open (its first showing gets the press).
   * `again`: show it even then, for a person who asked (the open one may sit unseen in the
   * notification centre; VS Code replaces a notification by an identical one).
   */
  async show(key: NoticeKey, severity: "error" | "warning", text: string, buttons: string[], again = false): Promise<string | undefined> {
    const current = this.open.get(key);
    if (current?.text === text && !again) {
      return undefined;
    }
    const mine: Open = { text };
    this.open.set(key, mine);
    if (current && current.text !== text) {
      await vscode.commands.executeCommand(HIDE_TOASTS);
    }
    try {
      return severity === "error"
        ? await vscode.window.showErrorMessage(text, ...buttons)
        : await vscode.window.showWarningMessage(text, ...buttons);
    } finally {
      if (this.open.get(key) === mine) {
        this.open.delete(key);
      }
    }
  }

  /** Take back the notice under `key` if it is still open. */
  async withdraw(key: NoticeKey): Promise<void> {
    if (this.open.delete(key)) {
      await vscode.commands.executeCommand(HIDE_TOASTS);
    }
  }
}
