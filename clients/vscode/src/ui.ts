/**
 * What every feature of the extension shares: the *compactd* output channel (the daemon's log
 * and the extension's own lines), the notices that can go stale (`notices.ts`), the settings and
 * the folder the daemon runs in, and one way to report a failure to the person: in the log and as
 * an error toast with "Show log", once (a failure already reported is a `ReportedError`).
 */

import * as os from "node:os";
import * as vscode from "vscode";

import { CompactdError } from "./core";
import { writeRefusal } from "./format";
import { Notices } from "./notices";

/** A failure the person was already told about; callers must not report it again. */
export class ReportedError extends Error {
  constructor(readonly cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause));
    this.name = "ReportedError";
  }
}

/** The `compactd.*` settings. */
export function settings(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration("compactd");
}

/** The folder open in the window (the daemon's working directory), else the home directory. */
export function workspaceDir(): string {
  return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? os.homedir();
}

export class Ui implements vscode.Disposable {
  readonly output: vscode.OutputChannel;
  readonly notices = new Notices();
  /** Runs after every command, whatever its outcome (the gauge redraws itself). */
  settled: () => void = () => undefined;

  constructor() {
    this.output = vscode.window.createOutputChannel("compactd");
  }

  reportError(what: string, err: unknown): void {
    if (err instanceof ReportedError) {
      return;
    }
    const message = err instanceof Error ? err.message : String(err);
    // A write the daemon refused on a followed or another window's session: say what to do.
    const refusal = err instanceof CompactdError ? writeRefusal(err.dataCode, err.data) : undefined;
    if (refusal !== undefined) {
      this.output.appendLine(`${what}: ${message}`);
      void vscode.window.showWarningMessage(refusal);
      return;
    }
    this.output.appendLine(`${what} failed: ${message}`);
    void vscode.window.showErrorMessage(`${what} failed: ${message}`, "Show log").then((choice) => {
      if (choice) {
        this.output.show();
      }
    });
  }

  /** Run `run`, report its failure as `what` failed, and settle the display either way. */
  async withErrors<T>(what: string, run: () => Promise<T>): Promise<T | undefined> {
    try {
      return await run();
    } catch (err) {
      this.reportError(what, err);
      return undefined;
    } finally {
      this.settled();
    }
  }

  dispose(): void {
    this.output.dispose();
  }
}
