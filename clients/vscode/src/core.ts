/**
 * The extension's client: the `@compactd/client` package's `CompactdClient` (spawning the daemon,
 * JSON-RPC with LSP framing, the typed methods generated from the protocol, cancellation, errors,
 * work-done progress, shutdown) with the one thing the editor adds: `onTokens`, every fresh token
 * status whichever call or notification brought it, so the gauge and the panel redraw from one
 * event. It imports nothing from VS Code, so it runs (and is tested) in plain Node.
 */

import {
  CompactdClient as ProtocolClient,
  type ClientOptions,
  type Disposable,
  type Methods,
  type RequestOptions,
  type TokenStatus,
} from "@compactd/client";

export * from "@compactd/client";

/** Every request method of the protocol, as named in the generated contract. */
export type MethodName = keyof Methods;

/** A token status that came back from any call or notification, tagged with its session. */
export interface TokensChanged {
  sessionId: string;
  status: TokenStatus;
}

export class CompactdClient extends ProtocolClient {
  private readonly tokensListeners = new Set<(e: TokensChanged) => void>();

  constructor(options: ClientOptions = {}) {
    super({ clientName: "compactd-vscode", ...options });
    this.listen("tokens/threshold", (note) => this.tokens(note.sessionId, note.status));
    this.listen("session/followed", (note) => this.tokens(note.sessionId, note.status));
  }

  /** Any fresh token status: from a result that carries one, a threshold or a followed line. */
  onTokens(listener: (e: TokensChanged) => void): Disposable {
    this.tokensListeners.add(listener);
    return { dispose: () => this.tokensListeners.delete(listener) };
  }

  override async request<M extends MethodName>(method: M, params: Methods[M]["params"], options?: RequestOptions): Promise<Methods[M]["result"]> {
    const result = await super.request(method, params, options);
    const answer = result as { sessionId?: unknown; status?: TokenStatus | null };
    const asked = (params as { sessionId?: unknown } | undefined)?.sessionId;
    const sessionId = typeof answer.sessionId === "string" ? answer.sessionId : asked;
    if (typeof sessionId === "string") {
      if (method === "tokens/status") {
        this.tokens(sessionId, result as TokenStatus);
      } else if (answer.status) {
        this.tokens(sessionId, answer.status);
      } else if (method === "compact/full") {
        // The result has no status; ask for it so listeners see the freed space at once.
        await this.tokensStatus({ sessionId }).catch(() => undefined);
      }
    }
    return result;
  }

  private tokens(sessionId: string, status: TokenStatus): void {
    for (const listener of [...this.tokensListeners]) {
      listener({ sessionId, status });
    }
  }
}
