/** The two ways a request fails: the daemon refused it, or there is no daemon to ask. */

import type { ErrorCode } from "./protocol";

/** JSON-RPC's number for a cancelled request (LSP `RequestCancelled`). */
export const REQUEST_CANCELLED = -32800;

/**
 * An error answered by the daemon. `dataCode` is the stable `error.data.code` string
 * (`sessionNotFound`, `invalidParams`, `cancelled`, ...: `ERROR_CODES`), the one to switch on;
 * `code` is the JSON-RPC `error.code` number; `data` the rest of `error.data` (a locked session's
 * holder, say).
 */
export class CompactdError extends Error {
  readonly code: number;
  readonly dataCode: ErrorCode | string;
  readonly data: Record<string, unknown>;

  constructor(code: number, message: string, data: Record<string, unknown>) {
    super(message);
    this.name = "CompactdError";
    this.code = code;
    this.data = data;
    const dataCode = data["code"];
    if (typeof dataCode === "string") {
      this.dataCode = dataCode;
    } else if (code === REQUEST_CANCELLED) {
      // vscode-jsonrpc can answer a cancellation itself, without the daemon's data.code.
      this.dataCode = "cancelled";
    } else {
      this.dataCode = `jsonrpc${code}`;
    }
  }

  /** The request was cancelled (the daemon left the session as it was). */
  get cancelled(): boolean {
    return this.dataCode === "cancelled";
  }
}

/** The daemon is not running: never started, exited (its last words in the message), or disposed. */
export class DaemonNotRunningError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DaemonNotRunningError";
  }
}
