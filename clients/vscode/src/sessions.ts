/**
 * The session on display: opening it (with the model and window the settings name), choosing it
 * from a quick pick of the daemon's sessions and this workspace's Claude Code transcripts (or a
 * transcript file), remembering it per workspace for the next window, and re-opening it when a
 * restarted daemon connects. The gauge shows it; the compaction and breakdown commands act on it.
 * A Claude Code transcript chosen here is followed as it grows (`follow.ts` says when).
 *
 * One daemon owns a session at a time (docs/durability.md#ownership): a second VS Code window on
 * the workspace runs a daemon of its own, which is told `sessionLocked`. A Claude Code session
 * that window follows is then followed here under the next free id of `followIds` (its own copy,
 * so the gauge keeps moving); any other session held elsewhere is shown read-only, with a quiet
 * notice saying where it is open.
 */

import * as os from "node:os";
import * as vscode from "vscode";

import { CompactdError, type OpenResult } from "./core";
import type { Daemon } from "./daemon";
import { followIds, readOnlyNotice, sessionRows } from "./format";
import type { Gauge } from "./gauge";
import { sessionIdFor, workspaceTranscripts } from "./transcripts";
import { settings, workspaceDir, type Ui } from "./ui";

/** workspaceState: the session on display in this workspace, restored on the next window. */
const ACTIVE_SESSION_KEY = "compactd.activeSession";

/**
 * How many compactd ids a followed Claude Code session may take in turn (`followIds`): one per
 * VS Code window open on the workspace at once; more windows than this is no longer a use.
 */
export const FOLLOW_IDS = 8;

export class Sessions {
  private sessionId: string | undefined;
  private source: string | undefined;
  private followed = false;
  private readOnlyView = false;
  private readonly changed: Array<() => void> = [];
  /** Whether a Claude Code transcript picked in the quick pick is followed (the setting, by default). */
  followPicked: () => boolean = () => false;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly ui: Ui,
    private readonly daemon: Daemon,
    private readonly gauge: Gauge,
  ) {
    daemon.onClient({
      // A restarted daemon restores sessions from its transcripts; re-open the one on display.
      connected: async () => {
        if (this.sessionId) {
          await this.open(this.sessionId).catch((err: unknown) => this.ui.reportError("Reopening the session", err));
        }
      },
    });
  }

  /** The session on display. */
  get active(): string | undefined {
    return this.sessionId;
  }

  /** The Claude Code transcript the session on display was imported from, if any. */
  get importedFrom(): string | undefined {
    return this.source;
  }

  /** Whether the daemon follows the transcript of the session on display. */
  get following(): boolean {
    return this.followed;
  }

  /** Whether the session on display is shown read-only (another daemon owns it). */
  get readOnly(): boolean {
    return this.readOnlyView;
  }

  /** Run `listener` after each open (the session on display may have changed). */
  onDidChange(listener: () => void): void {
    this.changed.push(listener);
  }

  /**
   * Open `sessionId` (importing `transcriptPath` when given) and put it on display. `follow`:
   * true to follow the transcript as it grows, false to stop, undefined to keep what the daemon
   * remembers for the session.
   */
  async open(sessionId: string, transcriptPath?: string, follow?: boolean): Promise<void> {
    let opened: OpenResult;
    try {
      opened = await this.request(sessionId, transcriptPath, follow, false);
    } catch (err) {
      if (!(err instanceof CompactdError && err.dataCode === "sessionLocked")) throw err;
      if (follow === true && transcriptPath) {
        await this.openFollowed(transcriptPath);
        return;
      }
      // Another window's daemon owns it: show it as it is, without owning it.
      opened = await this.request(sessionId, undefined, undefined, true);
      const notice = readOnlyNotice(sessionId, opened.heldBy ?? { pid: err.data["holderPid"], host: err.data["holderHost"] });
      this.ui.output.appendLine(notice);
      void vscode.window.showInformationMessage(notice);
    }
    await this.display(opened);
  }

  /**
   * Follow the Claude Code transcript `file` and put it on display, under the first id of
   * `followIds` no other daemon owns. Returns the id it is followed under.
   */
  async openFollowed(file: string): Promise<string> {
    const ids = followIds(sessionIdFor(file), FOLLOW_IDS);
    for (const [i, id] of ids.entries()) {
      try {
        await this.display(await this.request(id, file, true, false));
        return id;
      } catch (err) {
        // Held by another window (or, rarely, an id taken by another import): try the next.
        const next = err instanceof CompactdError && (err.dataCode === "sessionLocked" || err.dataCode === "sessionExists") && i + 1 < ids.length;
        if (!next) throw err;
        this.ui.output.appendLine(
          err.dataCode === "sessionLocked"
            ? `${id} is followed by another compactd (pid ${String(err.data["holderPid"])}); this window follows the same transcript as ${ids[i + 1]!}`
            : `${id} is another session of the data dir; trying ${ids[i + 1]!}`,
        );
      }
    }
    throw new Error("unreachable: the last id's error is thrown in the loop");
  }

  private async request(sessionId: string, transcriptPath: string | undefined, follow: boolean | undefined, readOnly: boolean): Promise<OpenResult> {
    const client = await this.daemon.ensureClient();
    const config = settings();
    const contextWindow = config.get<number | null>("contextWindow") || undefined;
    // No model set: the daemon takes the one the transcript names, else the session's own.
    const model = config.get<string>("model")?.trim() || undefined;
    return client.sessionOpen({
      sessionId,
      cwd: workspaceDir(),
      ...(model ? { model } : {}),
      ...(contextWindow ? { contextWindow } : {}),
      ...(transcriptPath ? { transcriptPath } : {}),
      ...(follow !== undefined ? { follow } : {}),
      ...(readOnly ? { readOnly } : {}),
    });
  }

  private async display(opened: OpenResult): Promise<void> {
    await this.gauge.show(opened.sessionId, opened.status);
    this.sessionId = opened.sessionId;
    this.source = opened.importedFrom ?? undefined;
    this.followed = opened.following === true;
    this.readOnlyView = opened.readOnly === true;
    await this.context.workspaceState.update(ACTIVE_SESSION_KEY, opened.sessionId);
    this.gauge.render();
    for (const listener of this.changed) listener();
  }

  /** Quick pick: one row per session, the daemon's and this workspace's Claude Code transcripts. */
  async select(): Promise<void> {
    const client = await this.daemon.ensureClient();
    type Pick = vscode.QuickPickItem & { sessionId?: string; transcript?: string; browse?: boolean };
    const listed = await client.sessionList();
    const transcripts = await workspaceTranscripts(os.homedir(), workspaceDir());
    const items: Pick[] = [];
    let group: string | undefined;
    for (const row of sessionRows(listed.sessions, transcripts)) {
      if (row.group !== group) {
        group = row.group;
        const label = group === "daemon" ? "compactd sessions" : "Claude Code transcripts of this workspace";
        items.push({ label, kind: vscode.QuickPickItemKind.Separator });
      }
      items.push({ ...row, ...(row.sessionId === this.sessionId ? { picked: true } : {}) });
    }
    items.push({ label: "$(file) Import a transcript file…", browse: true });
    const choice = await vscode.window.showQuickPick(items, { placeHolder: "Session to show and compact", matchOnDetail: true });
    if (!choice) {
      return;
    }
    if (choice.browse) {
      const files = await vscode.window.showOpenDialog({
        canSelectMany: false,
        filters: { "Claude Code transcript": ["jsonl"] },
      });
      const file = files?.[0]?.fsPath;
      if (file) {
        // Claude Code names transcripts by session id: reusing it re-opens an earlier import.
        const id = sessionIdFor(file);
        await this.open(id, listed.sessions.some((s) => s.sessionId === id) ? undefined : file);
      }
    } else if (choice.sessionId) {
      await this.open(choice.sessionId, choice.transcript, choice.transcript && this.followPicked() ? true : undefined);
    }
  }

  /** The session of the last window in this workspace (or the setting), if the daemon has it. */
  async restore(): Promise<void> {
    const remembered = this.context.workspaceState.get<string>(ACTIVE_SESSION_KEY);
    const configured = settings().get<string>("sessionId");
    if (remembered) {
      const client = await this.daemon.ensureClient(false);
      if ((await client.sessionList()).sessions.some((s) => s.sessionId === remembered)) {
        this.ui.output.appendLine(`showing session ${remembered}, as in the last window of this workspace`);
        await this.open(remembered);
        return;
      }
      this.ui.output.appendLine(`the session of the last window (${remembered}) is gone from the data dir`);
      await this.context.workspaceState.update(ACTIVE_SESSION_KEY, undefined);
    }
    if (configured) {
      await this.open(configured);
    }
  }

  /** The session on display; when there is none, the person is asked to choose one. */
  async activeOrAsk(): Promise<string | undefined> {
    if (!this.sessionId) {
      await this.select();
    }
    return this.sessionId;
  }

  /** `compactd.refresh`: ask the daemon for the displayed session's status again. */
  async refresh(): Promise<void> {
    const client = this.daemon.current();
    if (this.sessionId && client) {
      await client.tokensStatus({ sessionId: this.sessionId });
    }
  }
}
