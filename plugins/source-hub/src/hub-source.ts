import { createHash } from 'node:crypto'
import {
  ADAPTER_FILE_NAMES,
  LoomError,
  pickAdapterFiles,
  untilAborted,
  withRetry,
  type AdapterFileInfo,
  type AdapterFilesProblem,
  type AdapterRef,
  type AdapterSource,
  type Logger,
  type ResolvedAdapter,
  type RetryPolicy,
  type SourceContext,
} from '@loom/core'
import { downloadFile } from './download-file.ts'
import type { HubClient, HubPath } from './hub-client.ts'
import { parseHubId, type HubId } from './hub-id.ts'
import { HubRequestError, isTransientHubError } from './hub-request-error.ts'

/** Resolutions pinned by sha never change; this many are remembered. */
const PINNED_CACHE_SIZE = 256

export interface HubSourceOptions {
  /** The `adapter_source` code. */
  readonly name: string
  readonly client: HubClient
  readonly retry: RetryPolicy
  /** Per-request timeout for metadata, idle timeout for file bodies. */
  readonly timeoutMs: number
  /** The caller's token, or the server's when the fallback is on. */
  readonly tokenFor: (token: string | undefined) => string | undefined
  readonly logger: Logger
}

/**
 * Adapters in model repositories of the Hugging Face hub (or a hub-compatible server).
 *
 * resolve(): model info at the requested revision gives the commit sha (the cache key), then one
 * `paths-info` call at that sha lists which adapter files exist, with sizes and, for LFS files,
 * sha256. How long a branch resolution is reused is the core's policy (`adapters.resolve_ttl_s`);
 * this source only remembers sha-pinned ids, whose answer never changes, and lets concurrent
 * identical resolutions with the same token share one pair of hub calls. Sharing a result between
 * callers is safe because the core authorizes every request (AuthChecker) before it acquires.
 *
 * fetch(): one streamed GET per file at the pinned sha, size and sha256 checked, transient
 * failures (no answer, 5xx, 429, cut or damaged bodies) retried with exponential backoff.
 */
export class HubAdapterSource implements AdapterSource {
  readonly name: string
  readonly #options: HubSourceOptions
  /** Resolutions of sha-pinned ids, oldest first. */
  readonly #pinned = new Map<string, ResolvedAdapter>()
  readonly #inflight = new Map<string, Promise<ResolvedAdapter>>()

  constructor(options: HubSourceOptions) {
    this.name = options.name
    this.#options = options
  }

  async resolve(ref: AdapterRef, ctx: SourceContext): Promise<ResolvedAdapter> {
    const id = parseHubId(ref.id, this.name)
    const key = `${id.repo}@${id.revision ?? ''}`
    const pinned = this.#pinned.get(key)
    if (pinned) return pinned
    const token = this.#options.tokenFor(ctx.token)
    // Callers only share a call made with the same token: another token may be refused.
    const flightKey = `${key}\0${token === undefined ? '' : createHash('sha256').update(token).digest('hex')}`
    let flight = this.#inflight.get(flightKey)
    if (!flight) {
      // The shared call runs on its own signal (bounded by the timeout), so one caller leaving does not fail the rest.
      flight = this.#resolveNow(ref.id, id, token, new AbortController().signal, ctx.logger).finally(() =>
        this.#inflight.delete(flightKey),
      )
      this.#inflight.set(flightKey, flight)
    }
    const resolved = await untilAborted(flight, ctx.signal)
    if (id.revision === resolved.revision) this.#remember(key, resolved)
    return resolved
  }

  async fetch(resolved: ResolvedAdapter, destDir: string, ctx: SourceContext): Promise<void> {
    const token = this.#options.tokenFor(ctx.token)
    const total = resolved.files.reduce((sum, file) => sum + (file.size ?? 0), 0)
    const log = ctx.logger.child({ source: this.name, repo: resolved.id, revision: resolved.revision })
    log.info({ files: resolved.files.length, bytes: total }, 'downloading adapter from the hub')
    const started = Date.now()
    for (const file of resolved.files) {
      const target = { repo: resolved.id, sha: resolved.revision, file, destDir }
      try {
        await withRetry(
          () => downloadFile(this.#options.client, target, token, ctx.signal, this.#options.timeoutMs, log),
          {
            ...this.#options.retry,
            signal: ctx.signal,
            isRetryable: isTransientHubError,
            onRetry: (err, retry, delayMs) =>
              log.warn({ file: file.path, retry, delayMs, reason: (err as Error).message }, 'retrying download'),
          },
        )
      } catch (err) {
        throw this.#downloadError(resolved.id, token !== undefined, err)
      }
    }
    log.info({ bytes: total, ms: Date.now() - started }, 'adapter downloaded')
  }

  async #resolveNow(
    requested: string,
    id: HubId,
    token: string | undefined,
    signal: AbortSignal,
    logger: Logger,
  ): Promise<ResolvedAdapter> {
    const { client } = this.#options
    const retry = <T>(what: string, call: () => Promise<T>) =>
      withRetry(call, {
        ...this.#options.retry,
        signal,
        isRetryable: isTransientHubError,
        onRetry: (err, n, delayMs) =>
          logger.warn(
            { source: this.name, repo: id.repo, retry: n, delayMs, reason: (err as Error).message },
            `retrying ${what}`,
          ),
      })
    try {
      const facts = await retry('model info', () => client.modelInfo(id.repo, id.revision, token, signal))
      const listed = await retry('file list', () =>
        client.pathsInfo(id.repo, facts.sha, ADAPTER_FILE_NAMES, token, signal),
      )
      const files = chooseFiles(listed)
      if ('problem' in files) {
        const commit = `the repository (commit ${facts.sha.slice(0, 12)})`
        throw new LoomError('adapter_invalid', {
          id: requested,
          detail:
            files.problem === 'no_config'
              ? `${commit} has neither adapter_config.json (LoRA) nor config.json (Medusa)`
              : `${commit}: ${files.detail}`,
        })
      }
      logger.debug({ source: this.name, repo: id.repo, revision: facts.sha, files: files.length }, 'adapter resolved')
      // The id without `@revision`: every spelling of one commit shares a cache entry and a loaded adapter.
      return { source: this.name, id: id.repo, revision: facts.sha, files }
    } catch (err) {
      throw this.#resolveError(requested, token !== undefined, err)
    }
  }

  #remember(key: string, resolved: ResolvedAdapter): void {
    this.#pinned.set(key, resolved)
    // Drop the oldest entries first (a Map keeps insertion order).
    for (const old of this.#pinned.keys()) {
      if (this.#pinned.size <= PINNED_CACHE_SIZE) break
      this.#pinned.delete(old)
    }
  }

  #resolveError(id: string, hadToken: boolean, err: unknown): unknown {
    if (!(err instanceof HubRequestError)) return err
    if (err.kind === 'http' && err.status !== undefined) {
      const auth = authError(id, hadToken, err)
      if (auth) return auth
      if (err.status === 404) return new LoomError('adapter_not_found', { id, source: this.name }, { cause: err })
    }
    return new LoomError('adapter_source_unavailable', { source: this.name, id, detail: err.message }, { cause: err })
  }

  #downloadError(id: string, hadToken: boolean, err: unknown): unknown {
    if (!(err instanceof HubRequestError)) return err
    const auth = err.kind === 'http' ? authError(id, hadToken, err) : null
    return (
      auth ?? new LoomError('adapter_download_failed', { id, source: this.name, detail: err.message }, { cause: err })
    )
  }
}

/** 401/403 from the hub while resolving or downloading: the token changed under us, or none was sent. */
function authError(id: string, hadToken: boolean, err: HubRequestError): LoomError | null {
  if (err.status === 401) {
    return hadToken
      ? new LoomError('auth_invalid', { id, detail: 'the hub does not accept the token' }, { cause: err })
      : new LoomError('auth_missing', { id, detail: 'the repository is private or gated' }, { cause: err })
  }
  if (err.status === 403) {
    return new LoomError('auth_forbidden', { id, detail: 'the hub refused access to the repository' }, { cause: err })
  }
  return null
}

/**
 * The listed files the runtime needs, by the core's rule (`pickAdapterFiles`: safetensors over
 * `.bin`, Medusa weights only with `config.json`), with the sizes and LFS sha256 the hub reported.
 */
export function chooseFiles(listed: readonly HubPath[]): AdapterFileInfo[] | AdapterFilesProblem {
  const present = new Map(listed.filter((p) => p.type === 'file').map((p) => [p.path, p]))
  const picked = pickAdapterFiles(present.keys())
  if ('problem' in picked) return picked
  return picked.files.map((name) => {
    const p = present.get(name) as HubPath
    return p.lfsSha256 === undefined ? { path: name, size: p.size } : { path: name, size: p.size, sha256: p.lfsSha256 }
  })
}
