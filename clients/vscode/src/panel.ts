/**
 * The context panel (`compactd.showContext`, also the gauge's click): a webview that draws what
 * the next request of the session on display carries, its size over time with its compactions,
 * and what `compact/auto` would do next (the picture is `contextview.ts`). It has no script and
 * loads nothing: each refresh replaces its document. It refreshes when the session's tokens move
 * (an append, a followed line, a compaction), at most once per `REFRESH_MS`, and follows the
 * session on display when that changes. One panel per window; the command reveals it.
 */

import * as crypto from "node:crypto";
import * as vscode from "vscode";

import { contextHtml, type ContextData } from "./contextview";
import type { CompactdClient } from "./core";
import type { Daemon } from "./daemon";
import type { Sessions } from "./sessions";
import type { Ui } from "./ui";

/**
 * How often at most the panel asks the daemon again while the session grows: a followed session
 * can take in a line every few milliseconds while Claude Code streams a turn, and three requests
 * per line would be waste; a third of a second still looks live.
 */
export const REFRESH_MS = 300;

export const PANEL_VIEW_TYPE = "compactd.context";

export class ContextPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private shownSession: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private readonly listeners: vscode.Disposable[] = [];
  /** The document of the latest refresh (tests read it; VS Code gets it as `webview.html`). */
  html = "";
  /** Resolves after every refresh; tests wait on it. */
  private refreshed: Array<() => void> = [];

  constructor(
    private readonly ui: Ui,
    private readonly daemon: Daemon,
    private readonly sessions: Sessions,
  ) {
    daemon.onClient({ attach: (client) => this.attach(client) });
    sessions.onDidChange(() => {
      if (this.panel && this.sessions.active !== this.shownSession) this.schedule(0);
    });
  }

  private attach(client: CompactdClient): void {
    client.onTokens(({ sessionId }) => {
      if (this.panel && sessionId === this.sessions.active) this.schedule(REFRESH_MS);
    });
  }

  /** `compactd.showContext`: open (or reveal) the panel on the session on display. */
  async show(): Promise<void> {
    const sessionId = await this.sessions.activeOrAsk();
    if (!sessionId) return;
    if (this.panel) {
      this.panel.reveal(undefined, true);
    } else {
      const panel = vscode.window.createWebviewPanel(PANEL_VIEW_TYPE, "compactd: context", vscode.ViewColumn.Beside, {
        enableScripts: false,
        enableCommandUris: false,
        localResourceRoots: [],
      });
      this.panel = panel;
      panel.onDidDispose(() => {
        this.panel = undefined;
        this.shownSession = undefined;
        clearTimeout(this.timer);
      });
    }
    await this.refresh();
  }

  private schedule(ms: number): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh();
    }, ms);
  }

  /** Ask the daemon for the picture again and redraw; a refresh asked during one runs after it. */
  async refresh(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.draw().catch((err: unknown) => this.ui.output.appendLine(`context panel: ${err instanceof Error ? err.message : String(err)}`));
      } while (this.again && this.panel);
    })();
    try {
      await this.running;
    } finally {
      this.running = undefined;
      for (const done of this.refreshed.splice(0)) done();
    }
  }

  /** Resolves after the next refresh ends. */
  nextRefresh(): Promise<void> {
    return new Promise((resolve) => this.refreshed.push(resolve));
  }

  private async draw(): Promise<void> {
    const panel = this.panel;
    const sessionId = this.sessions.active;
    const client = this.daemon.current();
    if (!panel || !sessionId || !client) return;
    // Each part is optional: a picture without the preview beats no picture.
    const [status, breakdown, history, preview, listed] = await Promise.all([
      client.request("tokens/status", { sessionId }),
      client.tokensBreakdown({ sessionId }).catch(() => undefined),
      client.tokensHistory({ sessionId }).catch(() => undefined),
      client.compactPreview({ sessionId, mechanism: "auto" }).catch(() => undefined),
      client.sessionList().catch(() => undefined),
    ]);
    const following = listed?.sessions.find((s) => s.sessionId === sessionId)?.following ?? false;
    const data: ContextData = { sessionId, status, following };
    if (breakdown) data.breakdown = breakdown;
    if (history) data.history = history;
    if (preview) data.preview = preview;
    this.html = contextHtml(data, crypto.randomBytes(16).toString("base64"), panel.webview.cspSource);
    panel.title = `compactd: ${sessionId.slice(0, 8)}`;
    panel.webview.html = this.html;
    this.shownSession = sessionId;
  }

  get visible(): boolean {
    return this.panel !== undefined;
  }

  dispose(): void {
    clearTimeout(this.timer);
    for (const l of this.listeners) l.dispose();
    this.panel?.dispose();
  }
}
