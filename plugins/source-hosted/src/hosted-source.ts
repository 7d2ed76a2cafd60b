import { createHash } from 'node:crypto'
import path from 'node:path'
import {
  DownloadCheckError,
  FileDownload,
  LoomError,
  fetchErrorText,
  hasAdapterConfig,
  untilAborted,
  withRetry,
  type AdapterFileInfo,
  type AdapterRef,
  type AdapterSource,
  type Logger,
  type ResolvedAdapter,
  type RetryPolicy,
  type SourceContext,
} from '@loom/core'
import {
  HostedUnavailableError,
  TransientStatusError,
  isTransientHttpError,
  type HostedClient,
  type VersionDocument,
} from './hosted-client.ts'
import { parseHostedId, type HostedId } from './hosted-id.ts'

/** Statuses of a version that is still on its way to `completed`: retry later. */
const IN_PROGRESS = new Set(['pending', 'queued', 'training', 'stopping'])

export interface HostedSourceOptions {
  /** The `adapter_source` code (`pbase` by default). */
  readonly name: string
  readonly client: HostedClient
  /** Used when the request carries no token (`token` option or `PREDIBASE_API_TOKEN`). Never logged. */
  readonly fallbackToken?: string
  /** Tries per file download (a broken transfer resumes with `Range`). */
  readonly retry: RetryPolicy
}

/** A resolved hosted adapter remembers the version it pinned, so fetch() downloads exactly that. */
interface HostedResolvedAdapter extends ResolvedAdapter {
  readonly hosted: { readonly repo: string; readonly version: number }
}

/**
 * Adapters in the hosted adapter repository, named `<repo>/<version>` or `<repo>` (latest).
 *
 * resolve(): one metadata request with the caller's token (or the server's fallback token); a
 * version that is not `completed` is refused with `adapter_not_ready`. The revision is the version
 * number plus a hash of its file list, so `<repo>` moves to a new cache entry when a newer version
 * completes. fetch(): one GET per file, streamed to disk, resumed with `Range` after a broken
 * transfer, each file's size and SHA-256 checked against the listing.
 */
export class HostedAdapterSource implements AdapterSource {
  readonly name: string
  readonly #options: HostedSourceOptions
  /** Identical concurrent resolves (same id, same token) share one metadata request. */
  readonly #resolving = new Map<string, Promise<HostedResolvedAdapter>>()

  constructor(options: HostedSourceOptions) {
    this.name = options.name
    this.#options = options
  }

  async resolve(ref: AdapterRef, ctx: SourceContext): Promise<ResolvedAdapter> {
    const id = parseHostedId(ref.id, this.name)
    const token = ctx.token ?? this.#options.fallbackToken
    if (ctx.signal.aborted) throw ctx.signal.reason
    // The key holds a hash of the token, never the token.
    const key = `${ref.id}\0${token === undefined ? '' : createHash('sha256').update(token).digest('hex')}`
    let pending = this.#resolving.get(key)
    if (pending === undefined) {
      const shared = AbortSignal.timeout(5 * 60_000)
      pending = this.#resolve(ref.id, id, token, shared, ctx.logger).finally(() => this.#resolving.delete(key))
      pending.catch(() => undefined)
      this.#resolving.set(key, pending)
    }
    return await untilAborted(pending, ctx.signal)
  }

  async fetch(resolved: ResolvedAdapter, destDir: string, ctx: SourceContext): Promise<void> {
    const pinned = (resolved as Partial<HostedResolvedAdapter>).hosted ?? {
      repo: parseHostedId(resolved.id, this.name).repo,
      version: Number.parseInt(resolved.revision, 10),
    }
    const token = ctx.token ?? this.#options.fallbackToken
    const stop = new AbortController()
    const signal = AbortSignal.any([ctx.signal, stop.signal])
    await Promise.all(
      resolved.files.map((file) =>
        this.#fetchFile(resolved.id, pinned, file, destDir, token, signal, ctx.logger).catch((err: unknown) => {
          stop.abort(err)
          throw err
        }),
      ),
    )
  }

  async #resolve(
    adapterId: string,
    id: HostedId,
    token: string | undefined,
    signal: AbortSignal,
    logger: Logger,
  ): Promise<HostedResolvedAdapter> {
    const outcome = await this.#options.client
      .metadata(id, token, signal, (reason, attempt, waitMs) =>
        logger.warn(
          { source: this.name, adapter: adapterId, attempt, waitMs, reason },
          'hosted repository failed; retrying',
        ),
      )
      .catch((err: unknown) => {
        if (err instanceof HostedUnavailableError) {
          throw new LoomError(
            'adapter_source_unavailable',
            { source: this.name, id: adapterId, detail: err.message },
            { cause: err },
          )
        }
        throw err
      })
    if (outcome.kind === 'not_found') throw new LoomError('adapter_not_found', { id: adapterId, source: this.name })
    if (outcome.kind === 'denied') throw deniedError(adapterId, outcome.reason)
    const doc = outcome.document
    this.#checkReady(adapterId, doc)
    if (id.version !== undefined && doc.version !== id.version) {
      throw new LoomError('adapter_source_unavailable', {
        source: this.name,
        id: adapterId,
        detail: `asked for version ${id.version}, the repository answered version ${doc.version}`,
      })
    }
    if (!hasAdapterConfig(doc.files.map((f) => f.path))) {
      throw new LoomError('adapter_invalid', {
        id: adapterId,
        detail: `version ${doc.version} has neither adapter_config.json (LoRA) nor config.json (Medusa)`,
      })
    }
    const files: AdapterFileInfo[] = doc.files.map((f) =>
      f.sha256 === undefined ? { path: f.path, size: f.size } : { path: f.path, size: f.size, sha256: f.sha256 },
    )
    const listing = createHash('sha256')
    for (const f of files) listing.update(`${f.path}\0${f.size}\0${f.sha256 ?? ''}\n`)
    logger.debug(
      { source: this.name, adapter: adapterId, version: doc.version, files: files.length },
      'hosted adapter resolved',
    )
    return {
      source: this.name,
      id: adapterId,
      revision: `${doc.version}-${listing.digest('hex').slice(0, 12)}`,
      files,
      hosted: { repo: id.repo, version: doc.version },
    }
  }

  /** `completed` passes; training states are `adapter_not_ready`; a failed run is `adapter_invalid`. */
  #checkReady(adapterId: string, doc: VersionDocument): void {
    if (doc.status === 'completed') return
    if (IN_PROGRESS.has(doc.status)) {
      throw new LoomError('adapter_not_ready', {
        id: adapterId,
        source: this.name,
        status: doc.status,
        detail: `version ${doc.version} has no weights until training has completed; retry later`,
      })
    }
    throw new LoomError('adapter_invalid', {
      id: adapterId,
      detail: `version ${doc.version} ended with status \`${doc.status}\` and has no usable weights; name a completed version`,
    })
  }

  /** Download one file, resuming after a broken transfer; checks size and SHA-256 at the end. */
  async #fetchFile(
    adapterId: string,
    pinned: { readonly repo: string; readonly version: number },
    file: AdapterFileInfo,
    destDir: string,
    token: string | undefined,
    signal: AbortSignal,
    logger: Logger,
  ): Promise<void> {
    const download = new FileDownload(path.join(destDir, ...file.path.split('/')), {
      ...(file.size === undefined ? {} : { size: file.size }),
      ...(file.sha256 === undefined ? {} : { sha256: file.sha256 }),
      name: file.path,
    })
    const failed = (detail: string, cause?: unknown) =>
      new LoomError('adapter_download_failed', { id: adapterId, source: this.name, detail }, { cause })
    const checkFailed = (err: DownloadCheckError) =>
      failed(
        err.check === 'sha256'
          ? `${file.path} has SHA-256 ${err.actual}, the repository listed ${err.expected}`
          : err.message,
      )
    await withRetry(
      async () => {
        const response = await this.#options.client.openFile(
          pinned.repo,
          pinned.version,
          file.path,
          token,
          download.bytes,
          signal,
        )
        const status = response.status
        if (status !== 200 && status !== 206) {
          await response.body?.cancel()
          if (status === 401 || status === 403)
            throw deniedError(adapterId, status === 403 ? 'forbidden' : token ? 'invalid' : 'missing')
          if (status === 408 || status === 429 || status >= 500) throw new TransientStatusError(status)
          throw failed(`${file.path} answered HTTP ${status}`)
        }
        // A server that ignores Range sends the whole file again: start over.
        const append =
          status === 206 && (response.headers.get('content-range') ?? '').startsWith(`bytes ${download.bytes}-`)
        await download.write(response, { append, signal })
      },
      {
        ...this.#options.retry,
        signal,
        isRetryable: isTransientHttpError,
        onRetry: (err, attempt, waitMs) =>
          logger.warn(
            {
              source: this.name,
              adapter: adapterId,
              file: file.path,
              bytes: download.bytes,
              attempt,
              waitMs,
              reason: fetchErrorText(err),
            },
            'hosted download broke; retrying',
          ),
      },
    ).catch(async (err: unknown) => {
      await download.discard()
      if (signal.aborted) throw signal.reason
      if (err instanceof LoomError) throw err
      if (err instanceof DownloadCheckError) throw checkFailed(err)
      throw failed(`${file.path}: ${fetchErrorText(err)}`, err)
    })
    try {
      download.verify()
    } catch (err) {
      await download.discard()
      throw checkFailed(err as DownloadCheckError)
    }
  }
}

/** The error for a refused token; the message names the adapter, never the token. */
export function deniedError(id: string, reason: 'missing' | 'invalid' | 'forbidden'): LoomError {
  if (reason === 'missing')
    return new LoomError('auth_missing', { id, detail: 'the repository answered 401 without a token' })
  if (reason === 'invalid') {
    return new LoomError('auth_invalid', {
      id,
      detail: 'the hosted repository does not accept it (unknown or revoked)',
    })
  }
  return new LoomError('auth_forbidden', { id, detail: 'the hosted repository denies it access to this adapter' })
}
