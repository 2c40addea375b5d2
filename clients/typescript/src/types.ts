/**
 * The small types the client's API is made of. They are the client's own (not vscode-jsonrpc's),
 * so a program that uses the client compiles against these and the generated protocol types
 * only.
 */

/** Something to stop: a subscription, a listener. */
export interface Disposable {
  dispose(): void;
}

/** A subscription point: call it with a listener, dispose what it returns to stop listening. */
export type Event<T> = (listener: (value: T) => void) => Disposable;

/**
 * A cancellation token in the shape VS Code's and vscode-jsonrpc's have, so an extension can pass
 * the token of a `withProgress` callback or a command as it is.
 */
export interface CancellationLike {
  readonly isCancellationRequested: boolean;
  onCancellationRequested(listener: (e: unknown) => unknown): { dispose(): unknown };
}

/** How one request may be cancelled: aborting `signal` or cancelling `token` sends `$/cancelRequest`. */
export interface RequestOptions {
  signal?: AbortSignal;
  token?: CancellationLike;
}
