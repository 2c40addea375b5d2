/**
 * LSP work-done progress as the daemon reports a long operation (a compaction): it creates a
 * token (`window/workDoneProgress/create`), then sends `$/progress` begin, reports and end on it;
 * `window/workDoneProgress/cancel` from the client cancels the operation.
 */

/** The values of `$/progress` for a work-done progress (LSP `WorkDoneProgressBegin/Report/End`). */
export type WorkDoneProgressValue =
  | { kind: "begin"; title: string; message?: string; percentage?: number; cancellable?: boolean }
  | { kind: "report"; message?: string; percentage?: number; cancellable?: boolean }
  | { kind: "end"; message?: string };

type Listener = (message: string | undefined) => void;

/**
 * One work-done progress the daemon began on this client: its title, its reports as they come, and
 * its end (`done` settles with the end's message, or undefined when the daemon went away first).
 */
export class WorkDoneProgress {
  readonly title: string;
  readonly cancellable: boolean;
  /** The latest message (the begin's, then each report's). */
  message: string | undefined;
  /** Settles when the progress ends. */
  readonly done: Promise<string | undefined>;
  private finish: (message: string | undefined) => void = () => undefined;
  private ended = false;
  private readonly listeners = new Set<Listener>();

  constructor(
    readonly token: string | number,
    begin: { title: string; message?: string; cancellable?: boolean },
    private readonly sendCancel: () => void,
  ) {
    this.title = begin.title;
    this.message = begin.message;
    this.cancellable = begin.cancellable === true;
    this.done = new Promise((resolve) => {
      this.finish = resolve;
    });
  }

  /** A report: the new message (undefined when the report only moved the percentage). */
  onReport(listener: Listener): { dispose(): void } {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  /** Ask the daemon to cancel the operation behind this progress. */
  cancel(): void {
    if (!this.ended) {
      this.sendCancel();
    }
  }

  get isDone(): boolean {
    return this.ended;
  }

  /** @internal the client feeds `$/progress` values in. */
  report(message: string | undefined): void {
    if (!this.ended) {
      this.message = message ?? this.message;
      for (const listener of [...this.listeners]) {
        listener(message);
      }
    }
  }

  /** @internal */
  end(message: string | undefined): void {
    if (!this.ended) {
      this.ended = true;
      this.listeners.clear();
      this.finish(message);
    }
  }
}
