import { createHash, randomBytes } from 'node:crypto'
import { mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { AdapterSource, SourceContext } from '../contracts/adapter-source.ts'
import type { ResolvedAdapter } from '../contracts/adapter.ts'
import type { Logger } from '../contracts/logger.ts'
import { LoomError, isLoomError } from '../errors/index.ts'
import type { Metrics } from '../metrics/index.ts'
import { DownloadProgress, type DownloadStatus } from './download-progress.ts'
import { bytesUnder, findDownloadProblem } from './file-checks.ts'
import { lifetimeController, scopedSignal } from './scoped-signal.ts'

const COMPLETE_MARKER = '.loom-complete'
/** Written next to the marker: which adapter a cache directory holds (directory names are lossy). */
const IDENTITY_FILE = '.loom-adapter.json'
/**
 * How often a download's bytes are measured and logged: a download still running after a second
 * logs a line a second (bytes, rate, time left); a quick one logs none.
 */
const PROGRESS_EVERY_MS = 1000
/** A temporary download directory untouched this long belongs to a process that died. */
const STALE_TEMPORARY_MS = 6 * 60 * 60 * 1000

/** Longest path segment `segment` returns (file systems allow 255 bytes). */
const MAX_SEGMENT = 160

/**
 * Turn an id into one safe path segment (ids may hold `/`, `@`, `:`), injectively: two ids never
 * share a directory, or one tenant's adapter could be served as another's. Percent-encoding is
 * injective; `%` becomes `_`, so `_` itself (and `.`, which could make `.` or `..`) is encoded
 * first: `encodeURIComponent` never emits `%5F` or `%2E`, so no other input maps to those
 * codes. Long ids keep a readable prefix and a hash (`+` never occurs otherwise).
 */
export function cacheSegment(text: string): string {
  const encoded = encodeURIComponent(text).replace(/_/g, '%5F').replace(/\./g, '%2E').replace(/%/g, '_')
  if (encoded.length <= MAX_SEGMENT) return encoded
  return `${encoded.slice(0, MAX_SEGMENT - 65)}+${createHash('sha256').update(text).digest('hex')}`
}

export interface AdapterCacheOptions {
  readonly root: string
  /** Attempts per download; transient failures (network, 5xx, truncated files) are retried with backoff. */
  readonly attempts: number
  readonly logger: Logger
  readonly metrics?: Metrics
  /** Base backoff in ms (doubled per attempt). Tests shorten it. */
  readonly backoffMs?: number
}

/**
 * The disk cache of fetched adapters, keyed by `(source, id, revision)`. A download goes to a
 * private temporary directory and is renamed into place only when every file is present with the
 * size and checksum the source promised, so a partial or corrupt download is never used.
 * Concurrent requests for one cold adapter share one download.
 */
export class AdapterCache {
  readonly #options: AdapterCacheOptions
  readonly #inflight = new Map<string, Promise<string>>()
  /** Downloads in flight (one attempt each), for `downloads()`. */
  readonly #progress = new Set<DownloadProgress>()
  /** Cache directories whose files were checked against their source's sizes and checksums. */
  readonly #verified = new Set<string>()
  #sweepOnce: Promise<void> | null = null
  /** Aborted by `close()`: downloads in flight stop when the server shuts down. */
  readonly #closed = lifetimeController()

  constructor(options: AdapterCacheOptions) {
    this.#options = options
  }

  /** The directory an adapter's files live in once cached. */
  pathFor(resolved: ResolvedAdapter): string {
    return join(
      this.#options.root,
      cacheSegment(resolved.source),
      cacheSegment(resolved.id),
      cacheSegment(resolved.revision),
    )
  }

  /** Abort downloads in flight (server shutdown). */
  close(): void {
    this.#closed.abort(new Error('the server is shutting down'))
  }

  /** Return the cached directory, downloading it first if needed. */
  async ensure(resolved: ResolvedAdapter, source: AdapterSource, ctx: SourceContext): Promise<string> {
    if (resolved.localDir !== undefined) return resolved.localDir
    const dir = this.pathFor(resolved)
    const pending = this.#inflight.get(dir)
    if (pending) return pending
    this.#sweepOnce ??= this.#sweepStaleTemporaries()
    if (await isComplete(dir)) {
      // The files are checked once per process (sizes and checksums the source promised): a
      // truncated or edited cache entry is fetched again rather than failing every request.
      const problem = !(await holds(dir, resolved))
        ? 'it holds another adapter'
        : this.#verified.has(dir)
          ? null
          : await findDownloadProblem(dir, resolved.files)
      if (problem === null) {
        this.#verified.add(dir)
        this.#options.metrics?.adapterDownloaded(resolved.source, 'cached')
        return dir
      }
      this.#options.logger.warn(
        { adapter: resolved.id, source: resolved.source, dir, problem },
        'cached adapter directory is not usable; downloading again',
      )
      await rm(dir, { recursive: true, force: true })
    }
    // Re-check: another request may have started the download while we looked at the disk.
    const raced = this.#inflight.get(dir)
    if (raced) return raced
    // The shared download must not die with the first caller: it gets its own signal, released
    // from the cache's close signal once done (see scoped-signal.ts for why not AbortSignal.any).
    const scoped = scopedSignal(this.#closed.signal, AbortSignal.timeout(30 * 60 * 1000))
    const download = this.#download(resolved, source, { ...ctx, signal: scoped.signal }, dir).finally(() => {
      scoped.release()
      this.#inflight.delete(dir)
    })
    this.#inflight.set(dir, download)
    return download
  }

  async #download(resolved: ResolvedAdapter, source: AdapterSource, ctx: SourceContext, dir: string): Promise<string> {
    const { attempts, metrics } = this.#options
    const started = performance.now()
    let lastError: unknown
    for (let attempt = 1; attempt <= attempts; attempt++) {
      try {
        await this.#attempt(resolved, source, ctx, dir)
        metrics?.adapterDownloaded(resolved.source, 'downloaded', (performance.now() - started) / 1000)
        return dir
      } catch (err) {
        // Shutting down: no retry, and say so rather than "download failed".
        if (this.#closed.signal.aborted) throw new LoomError('server_closing')
        lastError = err
        if (!isTransient(err) || attempt === attempts) break
        const waitMs = (this.#options.backoffMs ?? 500) * 2 ** (attempt - 1)
        this.#options.logger.warn(
          { adapter: resolved.id, source: resolved.source, attempt, waitMs, reason: (err as Error).message },
          'adapter download failed; retrying',
        )
        await sleep(waitMs)
      }
    }
    metrics?.adapterDownloaded(resolved.source, 'failed')
    if (isLoomError(lastError)) throw lastError
    throw new LoomError(
      'adapter_download_failed',
      { id: resolved.id, source: resolved.source, detail: (lastError as Error).message },
      { cause: lastError },
    )
  }

  /** One download into a fresh temporary directory, verified, then renamed into place. */
  async #attempt(resolved: ResolvedAdapter, source: AdapterSource, ctx: SourceContext, dir: string): Promise<void> {
    const tmp = join(this.#options.root, '.tmp', `${cacheSegment(resolved.id)}-${randomBytes(6).toString('hex')}`)
    await mkdir(tmp, { recursive: true })
    const stopProgress = this.#reportProgress(resolved, tmp)
    try {
      await source.fetch(resolved, tmp, ctx)
      const problem = await findDownloadProblem(tmp, resolved.files)
      if (problem !== null) throw new TransientError(problem)
      const identity = { source: resolved.source, id: resolved.id, revision: resolved.revision }
      await writeFile(join(tmp, IDENTITY_FILE), JSON.stringify(identity))
      await writeFile(join(tmp, COMPLETE_MARKER), new Date().toISOString())
      await mkdir(join(dir, '..'), { recursive: true })
      await rename(tmp, dir).catch(async (err: NodeJS.ErrnoException) => {
        // Another process finished the same revision first: theirs is complete, keep it.
        if ((err.code === 'ENOTEMPTY' || err.code === 'EEXIST') && (await isComplete(dir))) return
        throw err
      })
    } finally {
      stopProgress()
      await rm(tmp, { recursive: true, force: true })
    }
  }

  /**
   * Remove temporary download directories a killed process left behind. Only old ones: another
   * process sharing this cache may be downloading into a fresh one right now.
   */
  async #sweepStaleTemporaries(): Promise<void> {
    const tmpRoot = join(this.#options.root, '.tmp')
    const entries = await readdir(tmpRoot).catch(() => [] as string[])
    const cutoff = Date.now() - STALE_TEMPORARY_MS
    for (const name of entries) {
      const path = join(tmpRoot, name)
      const info = await stat(path).catch(() => null)
      if (info !== null && info.mtimeMs < cutoff)
        await rm(path, { recursive: true, force: true }).catch(() => undefined)
    }
  }

  /** Downloads in flight now, oldest first. */
  downloads(): DownloadStatus[] {
    return [...this.#progress].map((p) => p.status())
  }

  /**
   * Track one download attempt for `downloads()`, measuring the bytes under `tmp` every second,
   * and log its bytes, rate and time left each time; returns the stopper.
   */
  #reportProgress(resolved: ResolvedAdapter, tmp: string): () => void {
    const total = resolved.files.reduce((sum, f) => sum + (f.size ?? 0), 0)
    const { source, id, revision } = resolved
    const progress = new DownloadProgress({ source, id, revision }, total)
    this.#progress.add(progress)
    let stopped = false
    const timer = setInterval(() => {
      void bytesUnder(tmp).then((done) => {
        // A measurement that finishes after the download did is not news.
        if (stopped) return
        progress.observe(done)
        const s = progress.status()
        this.#options.logger.info(
          {
            adapter: resolved.id,
            source: resolved.source,
            bytes: s.bytes,
            total,
            percent: s.percent,
            bytes_per_second: s.bytesPerSecond,
            eta_s: s.etaSeconds,
          },
          'downloading adapter',
        )
      })
    }, PROGRESS_EVERY_MS)
    timer.unref()
    return () => {
      stopped = true
      clearInterval(timer)
      this.#progress.delete(progress)
    }
  }
}

/** A failed check of downloaded files: worth another attempt. */
class TransientError extends Error {}

/** Network errors, 5xx-style source errors and failed file checks are retried; 4xx-style answers are final. */
function isTransient(err: unknown): boolean {
  if (err instanceof TransientError) return true
  if (isLoomError(err)) {
    return err.code === 'adapter_download_failed' || err.code === 'adapter_source_unavailable'
  }
  // Anything else (a socket reset, a source bug) is worth one more try, unless the request was aborted.
  return !(err instanceof Error && (err.name === 'AbortError' || err.name === 'TimeoutError'))
}

/** Whether the identity file in `dir` names exactly `resolved`. */
async function holds(dir: string, resolved: ResolvedAdapter): Promise<boolean> {
  const text = await readFile(join(dir, IDENTITY_FILE), 'utf8').catch(() => null)
  if (text === null) return false
  try {
    const identity = JSON.parse(text) as Record<string, unknown>
    return identity.source === resolved.source && identity.id === resolved.id && identity.revision === resolved.revision
  } catch {
    return false
  }
}

async function isComplete(dir: string): Promise<boolean> {
  return (await stat(join(dir, COMPLETE_MARKER)).catch(() => null)) !== null
}
