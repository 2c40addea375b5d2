/**
 * The token breakdown (`compactd.showBreakdown`, also the gauge's click): where the session's
 * tokens go, by category and by tool, as a quick pick, and as a table in the output channel.
 */

import * as vscode from "vscode";

import type { Daemon } from "./daemon";
import { breakdownRows, breakdownTable, groupDigits } from "./format";
import type { Sessions } from "./sessions";
import type { Ui } from "./ui";

export class Breakdown {
  constructor(
    private readonly ui: Ui,
    private readonly daemon: Daemon,
    private readonly sessions: Sessions,
  ) {}

  async show(): Promise<void> {
    const sessionId = await this.sessions.activeOrAsk();
    if (!sessionId) {
      return;
    }
    const client = await this.daemon.ensureClient();
    const bd = await client.tokensBreakdown({ sessionId });
    const output = this.ui.output;
    output.appendLine(`\ntoken breakdown of session ${sessionId}`);
    output.appendLine(breakdownTable(bd));
    const items: vscode.QuickPickItem[] = breakdownRows(bd).map((r) => ({
      label: r.group === "category" ? r.label : `$(indent) ${r.label}`,
      description: `${groupDigits(r.tokens)} tokens · ${r.percent.toFixed(1)}%`,
      detail: r.count !== undefined ? `${r.count} item${r.count === 1 ? "" : "s"}` : undefined,
    }));
    items.push({ label: "$(output) Show as a table", alwaysShow: true });
    const choice = await vscode.window.showQuickPick(items, {
      title: `${groupDigits(bd.totalTokens)} tokens in context`,
      matchOnDescription: true,
    });
    if (choice?.label.endsWith("Show as a table")) {
      output.show(true);
    }
  }
}
