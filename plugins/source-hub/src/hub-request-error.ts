/**
 * Why one request to the hub failed, in terms the source and the checker branch on:
 * - `http`: the hub answered a status (with its `X-Error-Code` when it sent one);
 * - `network`: no answer (refused, reset, cut mid-body);
 * - `timeout`: no answer, or no progress, within `timeout_ms`;
 * - `integrity`: a body of the wrong size or sha256;
 * - `format`: an answer this client cannot read.
 *
 * Messages are built here from status, path and error codes only: never from request headers, so
 * a token cannot leak into an error.
 */
export class HubRequestError extends Error {
  override readonly name = 'HubRequestError'
  readonly kind: 'http' | 'network' | 'timeout' | 'integrity' | 'format'
  readonly status: number | undefined
  readonly errorCode: string | undefined

  constructor(
    kind: HubRequestError['kind'],
    message: string,
    options: { status?: number; errorCode?: string; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.kind = kind
    this.status = options.status
    this.errorCode = options.errorCode
  }

  /** Worth trying again: no answer, a 5xx, 408/429, or a damaged body. */
  get transient(): boolean {
    if (this.kind === 'http') return this.status === 408 || this.status === 429 || (this.status ?? 0) >= 500
    return this.kind !== 'format'
  }
}

/** Whether `withRetry` should try again: a transient `HubRequestError`; anything else is a bug or final. */
export function isTransientHubError(err: unknown): boolean {
  return err instanceof HubRequestError && err.transient
}
