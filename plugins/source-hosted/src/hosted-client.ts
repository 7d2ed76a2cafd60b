import { fetchErrorText, withRetry, z, type RetryPolicy } from '@loom/core'
import type { HostedId } from './hosted-id.ts'

/** A file path inside a version: `/`-separated, no empty, `.` or `..` segments, no backslashes. */
const SAFE_PATH = /^(?!.*(^|\/)\.{1,2}(\/|$))[^/\\\x00-\x1f][^\\\x00-\x1f]*$/

/** The metadata document the repository answers for a version (extra fields are ignored). */
export const VersionDocument = z.object({
  repo: z.string(),
  version: z.number().int().positive(),
  status: z.string(),
  files: z
    .array(
      z.object({
        path: z
          .string()
          .regex(SAFE_PATH)
          .refine((p) => !p.endsWith('/'), 'must name a file'),
        size: z.number().int().nonnegative(),
        sha256: z
          .string()
          .regex(/^[0-9a-fA-F]{64}$/)
          .transform((s) => s.toLowerCase())
          .optional(),
      }),
    )
    .default([]),
})
export type VersionDocument = z.output<typeof VersionDocument>

/** The repository's answer to a metadata request. */
export type MetadataOutcome =
  | { readonly kind: 'ok'; readonly document: VersionDocument }
  | { readonly kind: 'denied'; readonly reason: 'missing' | 'invalid' | 'forbidden' }
  | { readonly kind: 'not_found' }

/** The repository could not give an answer (network, timeout, 5xx, nonsense). Never holds the token. */
export class HostedUnavailableError extends Error {
  override readonly name = 'HostedUnavailableError'
}

/** An answer worth another try: 408, 429, 5xx. */
export class TransientStatusError extends Error {
  override readonly name = 'TransientStatusError'
  constructor(readonly status: number) {
    super(`answered HTTP ${status}`)
  }
}

export interface HostedClientOptions {
  /** Base URL, ending with `/`. */
  readonly endpoint: URL
  /** Limit per metadata request attempt, in milliseconds. */
  readonly timeoutMs: number
  readonly retry: RetryPolicy
}

/** Whether a failure may go away on its own: a transient status, a socket error, a per-try timeout. */
export function isTransientHttpError(err: unknown): boolean {
  if (err instanceof TransientStatusError) return true
  // undici reports network failures and broken bodies as TypeError ("fetch failed", "terminated").
  if (err instanceof TypeError) return true
  return err instanceof Error && err.name === 'TimeoutError'
}

/**
 * HTTP client for the hosted repository protocol (see README.md). Knows the routes, Bearer auth,
 * status mapping and retries; knows nothing about Loom errors.
 */
export class HostedClient {
  readonly #options: HostedClientOptions

  constructor(options: HostedClientOptions) {
    this.#options = options
  }

  /** `GET /v2/repos/{repo}` (latest) or `GET /v2/repos/{repo}/version/{v}`. */
  metadataUrl(id: HostedId): URL {
    const repo = encodeURIComponent(id.repo)
    return new URL(
      id.version === undefined ? `v2/repos/${repo}` : `v2/repos/${repo}/version/${id.version}`,
      this.#options.endpoint,
    )
  }

  /** `GET /v2/repos/{repo}/version/{v}/files/{path}`. */
  fileUrl(repo: string, version: number, path: string): URL {
    const encoded = path.split('/').map(encodeURIComponent).join('/')
    return new URL(`v2/repos/${encodeURIComponent(repo)}/version/${version}/files/${encoded}`, this.#options.endpoint)
  }

  /**
   * Ask for a version's metadata with `token` (if any). 401/403/404 are answers, not failures;
   * transient failures are retried; anything else throws `HostedUnavailableError`.
   */
  async metadata(
    id: HostedId,
    token: string | undefined,
    signal: AbortSignal,
    onRetry?: (reason: string, attempt: number, waitMs: number) => void,
  ): Promise<MetadataOutcome> {
    const url = this.metadataUrl(id)
    try {
      return await withRetry(
        async () => {
          const attemptSignal = AbortSignal.any([signal, AbortSignal.timeout(this.#options.timeoutMs)])
          const response = await fetch(url, { headers: headersFor(token), signal: attemptSignal })
          return await readMetadata(response, token !== undefined)
        },
        {
          ...this.#options.retry,
          signal,
          isRetryable: isTransientHttpError,
          onRetry: (err, attempt, waitMs) => onRetry?.(fetchErrorText(err), attempt, waitMs),
        },
      )
    } catch (err) {
      if (signal.aborted) throw signal.reason
      if (err instanceof HostedUnavailableError) throw err
      const detail =
        err instanceof Error && err.name === 'TimeoutError'
          ? `GET ${url.pathname} took longer than ${this.#options.timeoutMs} ms`
          : `GET ${url.pathname} ${fetchErrorText(err)}`
      throw new HostedUnavailableError(detail, { cause: err })
    }
  }

  /** Start one file download (optionally from byte `start`); the caller reads and checks the body. */
  async openFile(
    repo: string,
    version: number,
    path: string,
    token: string | undefined,
    start: number,
    signal: AbortSignal,
  ): Promise<Response> {
    const headers = headersFor(token)
    if (start > 0) headers.range = `bytes=${start}-`
    return fetch(this.fileUrl(repo, version, path), { headers, signal })
  }
}

function headersFor(token: string | undefined): Record<string, string> {
  const headers: Record<string, string> = { accept: 'application/json' }
  if (token !== undefined) headers.authorization = `Bearer ${token}`
  return headers
}

async function readMetadata(response: Response, sentToken: boolean): Promise<MetadataOutcome> {
  const status = response.status
  if (status !== 200) {
    // The body is not needed (and is never echoed: a server may put anything there).
    await response.body?.cancel()
    if (status === 401) return { kind: 'denied', reason: sentToken ? 'invalid' : 'missing' }
    if (status === 403) return { kind: 'denied', reason: 'forbidden' }
    if (status === 404) return { kind: 'not_found' }
    if (status === 408 || status === 429 || status >= 500) throw new TransientStatusError(status)
    throw new HostedUnavailableError(`GET ${new URL(response.url).pathname} answered HTTP ${status}`)
  }
  const parsed = VersionDocument.safeParse(await response.json().catch(() => undefined))
  if (!parsed.success) {
    const issue = parsed.error.issues[0]
    throw new HostedUnavailableError(
      `GET ${new URL(response.url).pathname} answered a document that does not follow the protocol (${issue?.path.join('.') || 'body'}: ${issue?.message ?? 'not JSON'})`,
    )
  }
  return { kind: 'ok', document: parsed.data }
}
