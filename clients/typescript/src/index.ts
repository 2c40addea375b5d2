/**
 * @compactd/client: a typed client for the compactd daemon. The protocol's types and tables
 * (`protocol.ts`) and the typed methods (`methods.ts`) are generated from the daemon's protocol;
 * the rest is the connection (`client.ts`), its errors and work-done progress.
 */

export * from "./protocol";
export { ProtocolMethods } from "./methods";
export {
  CompactdClient,
  DEFAULT_SERVER_COMMAND,
  DEFAULT_SHUTDOWN_GRACE_MS,
  lastLine,
  type ClientOptions,
  type DaemonStreams,
  type ExitInfo,
  type ServerDescription,
} from "./client";
export { CompactdError, DaemonNotRunningError } from "./errors";
export { WorkDoneProgress, type WorkDoneProgressValue } from "./progress";
export type { CancellationLike, Disposable, Event, RequestOptions } from "./types";
