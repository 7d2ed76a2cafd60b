import { createHash } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { mkdir, stat } from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import {
  LoomError,
  type AdapterFileInfo,
  type AdapterRef,
  type AdapterSource,
  type ResolvedAdapter,
  type SourceContext,
} from '@loom/core'
import { checkAdapterId, fileUrl } from './adapter-path.ts'

export interface HttpFilesSourceOptions {
  /** The `adapter_source` code. */
  readonly name: string
  /** Adapters live at `<baseUrl>/<adapter_id>/<file>`; ends with `/`. */
  readonly baseUrl: URL
  /** File names probed for each adapter, in order. */
  readonly files: readonly string[]
  /** Sent with every request (for example an `Authorization` header). Never logged. */
  readonly headers: Readonly<Record<string, string>>
  /** Limit for each resolve() probe, in milliseconds. */
  readonly timeoutMs: number
}

/** Files whose presence marks an adapter: LoRA (`adapter_config.json`) or Medusa (`config.json`). */
const MARKER_FILES = ['adapter_config.json', 'config.json']

/** What a HEAD request said about one file. */
interface Probe {
  readonly file: string
  readonly size: number | undefined
  /** ETag, else `size@Last-Modified`: what pins this file's content. */
  readonly version: string
}

/**
 * Adapters served by a plain HTTP file server (nginx, S3 website, `python -m http.server`).
 *
 * resolve(): one HEAD request per known file name, in parallel. A 200 lists the file with its
 * `Content-Length`; a 404 means the adapter does not ship that file. The adapter exists when its
 * `adapter_config.json` (LoRA) or `config.json` (Medusa) does. The revision is a hash of every
 * listed file's ETag (or size and Last-Modified when the server sends no ETag), so a changed file
 * on the server gives a new revision and a fresh cache entry.
 *
 * fetch(): one GET per listed file, streamed to disk, honouring `ctx.signal`; a size that differs
 * from the HEAD answer fails the download.
 */
export class HttpFilesSource implements AdapterSource {
  readonly name: string
  readonly #options: HttpFilesSourceOptions

  constructor(options: HttpFilesSourceOptions) {
    this.name = options.name
    this.#options = options
  }

  async resolve(ref: AdapterRef, ctx: SourceContext): Promise<ResolvedAdapter> {
    checkAdapterId(ref.id, this.name)
    const signal = AbortSignal.any([ctx.signal, AbortSignal.timeout(this.#options.timeoutMs)])
    const probes = await Promise.all(this.#options.files.map((file) => this.#probe(ref.id, file, signal)))
    const present = probes.filter((probe): probe is Probe => probe !== null)
    if (!present.some((probe) => MARKER_FILES.includes(probe.file))) {
      throw new LoomError('adapter_not_found', { id: ref.id, source: this.name })
    }
    const revision = createHash('sha256')
    for (const probe of present) revision.update(`${probe.file}\0${probe.version}\n`)
    const files: AdapterFileInfo[] = present.map((probe) =>
      probe.size === undefined ? { path: probe.file } : { path: probe.file, size: probe.size },
    )
    ctx.logger.debug({ source: this.name, id: ref.id, files: files.length }, 'adapter resolved')
    return { source: this.name, id: ref.id, revision: revision.digest('hex').slice(0, 32), files }
  }

  async fetch(resolved: ResolvedAdapter, destDir: string, ctx: SourceContext): Promise<void> {
    for (const file of resolved.files) {
      const target = path.join(destDir, ...file.path.split('/'))
      await mkdir(path.dirname(target), { recursive: true })
      const response = await this.#request('GET', resolved.id, file.path, ctx.signal, 'adapter_download_failed')
      if (response.status !== 200 || response.body === null) {
        await response.body?.cancel()
        throw this.#downloadError(resolved.id, `${file.path} answered HTTP ${response.status}`)
      }
      const body = Readable.fromWeb(response.body as WebReadableStream<Uint8Array>)
      try {
        await pipeline(body, createWriteStream(target), { signal: ctx.signal })
      } catch (err) {
        if (ctx.signal.aborted) throw err
        throw this.#downloadError(resolved.id, `${file.path}: ${errorText(err)}`, err)
      }
      const written = (await stat(target)).size
      if (file.size !== undefined && written !== file.size) {
        throw this.#downloadError(resolved.id, `${file.path} has ${written} bytes, expected ${file.size}`)
      }
    }
  }

  /** HEAD one file: its facts when present, null on 404, `adapter_source_unavailable` otherwise. */
  async #probe(id: string, file: string, signal: AbortSignal): Promise<Probe | null> {
    const response = await this.#request('HEAD', id, file, signal, 'adapter_source_unavailable')
    if (response.status === 404 || response.status === 410) return null
    if (response.status !== 200) {
      throw new LoomError('adapter_source_unavailable', {
        source: this.name,
        id,
        detail: `HEAD ${file} answered HTTP ${response.status}`,
      })
    }
    const length = response.headers.get('content-length')
    const size = length === null || !/^\d+$/.test(length) ? undefined : Number(length)
    const version = response.headers.get('etag') ?? `${size ?? '?'}@${response.headers.get('last-modified') ?? ''}`
    return { file, size, version }
  }

  /** One request; network failures become `code` (never echoing headers, which may hold a token). */
  async #request(
    method: 'HEAD' | 'GET',
    id: string,
    file: string,
    signal: AbortSignal,
    code: 'adapter_source_unavailable' | 'adapter_download_failed',
  ): Promise<Response> {
    try {
      return await fetch(fileUrl(this.#options.baseUrl, id, file), {
        method,
        headers: this.#options.headers,
        signal,
        redirect: 'follow',
      })
    } catch (err) {
      // A cancelled request stays a cancellation: the caller is gone and needs no adapter error.
      if (signal.aborted && !(signal.reason instanceof DOMException && signal.reason.name === 'TimeoutError')) {
        throw signal.reason
      }
      const detail = `${method} ${file}: ${errorText(err)}`
      throw code === 'adapter_source_unavailable'
        ? new LoomError(code, { source: this.name, id, detail }, { cause: err })
        : this.#downloadError(id, detail, err)
    }
  }

  #downloadError(id: string, detail: string, cause?: unknown): LoomError {
    return new LoomError('adapter_download_failed', { id, source: this.name, detail }, { cause })
  }
}

/** The most specific reason an error gives: undici hides the socket error under `cause`. */
function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err)
  const cause = err.cause
  if (cause instanceof Error) return `${err.message} (${(cause as NodeJS.ErrnoException).code ?? cause.message})`
  return err.message
}
