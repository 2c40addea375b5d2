/**
 * Following the workspace's running Claude Code session (`compactd.followClaudeCode`, on by
 * default): at startup the extension opens the workspace's most recently written Claude Code
 * transcript (`transcripts.ts` says where they are) with `follow: true`, so the daemon reads each
 * line Claude Code appends and the gauge moves with it (`session/followed`, docs/follow.md). It
 * then looks every `SCAN_MS` for a newer transcript of the workspace (a new `claude`, `/clear`, a
 * compaction resumed with `compactd.compactAndResume`) and switches to it, as long as the session
 * on display is the one it followed: a session the person picked themselves stays on display.
 * Turning the setting off stops both the watching and the daemon's following. When another VS
 * Code window's daemon already follows the transcript, this window follows it under an id of its
 * own (`Sessions.openFollowed`), so both gauges move.
 */

import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as vscode from "vscode";

import type { Daemon } from "./daemon";
import type { Sessions } from "./sessions";
import { sessionIdFor, workspaceTranscripts, type Transcript } from "./transcripts";
import { settings, workspaceDir, type Ui } from "./ui";

/**
 * How often the workspace's Claude Code folders are looked at for a newer session. Looking is a
 * directory listing and a stat per transcript; a new session shows up within this, while the
 * growth of the followed one is the daemon's business and shows within a second.
 */
export const SCAN_MS = 2_000;

const SETTING = "followClaudeCode";

export class Follow implements vscode.Disposable {
  private followed: string | undefined;
  /** The compactd session id `followed` is followed under (its own, or a suffixed one). */
  private followedId: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private scanning = false;
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(
    private readonly ui: Ui,
    private readonly daemon: Daemon,
    private readonly sessions: Sessions,
  ) {
    sessions.followPicked = () => this.enabled;
    this.subscriptions.push(
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration(`compactd.${SETTING}`)) {
          void this.ui.withErrors("Following Claude Code", () => this.settingChanged());
        }
      }),
    );
  }

  get enabled(): boolean {
    return settings().get<boolean>(SETTING) ?? true;
  }

  /** The Claude Code transcript followed on display, if any. */
  get transcript(): string | undefined {
    return this.followed !== undefined && this.sessions.active === this.followedId ? this.followed : undefined;
  }

  /** At startup: follow the workspace's newest transcript. False when off or there is none. */
  async start(): Promise<boolean> {
    if (!this.enabled) return false;
    this.watch();
    const newest = await this.newest();
    if (!newest) {
      this.ui.output.appendLine("no Claude Code session in this workspace yet; watching for one");
      return false;
    }
    await this.switchTo(newest.file, "the workspace's latest Claude Code session");
    return true;
  }

  /** Follow `file` and put it on display; the daemon stops reading the one followed before. */
  async switchTo(file: string, why: string): Promise<void> {
    const previous = this.followed;
    const previousId = this.followedId;
    const id = await this.sessions.openFollowed(file);
    this.followed = file;
    this.followedId = id;
    this.ui.output.appendLine(`following ${file} (${why})${id === sessionIdFor(file) ? "" : ` as ${id}`}`);
    const client = this.daemon.current();
    if (previous !== undefined && previousId !== undefined && previous !== file && client) {
      // Claude Code has moved on from it; reading it on would only cost.
      await client
        .sessionOpen({ sessionId: previousId, cwd: workspaceDir(), follow: false })
        .catch((err: unknown) => this.ui.output.appendLine(`could not stop following ${previous}: ${err instanceof Error ? err.message : String(err)}`));
    }
  }

  private async newest(): Promise<Transcript | undefined> {
    return (await workspaceTranscripts(os.homedir(), workspaceDir(), 1))[0];
  }

  private watch(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => void this.scan(), SCAN_MS);
    this.timer.unref();
  }

  private unwatch(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** A newer transcript than the one followed: switch, unless the person chose another session. */
  private async scan(): Promise<void> {
    if (this.scanning) return;
    this.scanning = true;
    try {
      const newest = await this.newest();
      if (!newest || newest.file === this.followed) return;
      const onDisplay = this.sessions.active;
      if (onDisplay !== undefined && (this.followed === undefined || onDisplay !== this.followedId)) {
        return; // the person is looking at a session of their choosing
      }
      if (this.followed !== undefined) {
        const current = await fs.stat(this.followed).catch(() => undefined);
        if (current && current.mtime >= newest.modified) return;
      }
      await this.switchTo(newest.file, "a newer Claude Code session of this workspace");
      void vscode.window.showInformationMessage(`compactd now follows the newer Claude Code session ${sessionIdFor(newest.file)}.`);
    } catch (err) {
      this.ui.output.appendLine(`looking for a newer Claude Code session failed: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      this.scanning = false;
    }
  }

  private async settingChanged(): Promise<void> {
    if (this.enabled) {
      if (!(await this.start())) return;
      return;
    }
    this.unwatch();
    const file = this.transcript;
    const id = this.followedId;
    this.followed = undefined;
    this.followedId = undefined;
    if (file && id) {
      // The session stays on display, as it is now: the daemon stops reading the file.
      await this.sessions.open(id, undefined, false);
      this.ui.output.appendLine(`stopped following ${file}`);
    }
  }

  dispose(): void {
    this.unwatch();
    for (const s of this.subscriptions) s.dispose();
  }
}
