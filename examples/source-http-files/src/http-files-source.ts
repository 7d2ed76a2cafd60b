import { createHash } from 'node:crypto'
import path from 'node:path'
import {
  ADAPTER_FILE_NAMES,
  DownloadCheckError,
  LoomError,
  downloadFile,
  fetchErrorText,
  hasAdapterConfig,
  pickAdapterFiles,
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
 * resolve(): one HEAD request per configured file name, in parallel. A 200 means the file is
 * there, with its `Content-Length`; a 404 means the adapter does not ship it. The adapter exists
 * when its `adapter_config.json` (LoRA) or `config.json` (Medusa) does. Among the files the core
 * knows, `pickAdapterFiles` (from `@loom/core`) chooses what to fetch (safetensors over `.bin`,
 * Medusa weights only with `config.json`); names the core does not know, added to `files` by the
 * operator, are always fetched. The revision is a hash of every listed file's ETag (or size and
 * Last-Modified when the server sends no ETag), so a changed file on the server gives a new
 * revision and a fresh cache entry.
 *
 * fetch(): one GET per listed file, streamed to disk by the core's `downloadFile`, honouring
 * `ctx.signal`; a size that differs from the HEAD answer fails the download.
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
    // A file server cannot tell a missing folder from one without an adapter: both are not found.
    if (!hasAdapterConfig(present.map((probe) => probe.file))) {
      throw new LoomError('adapter_not_found', { id: ref.id, source: this.name })
    }
    const picked = pickAdapterFiles(present.map((probe) => probe.file))
    if ('problem' in picked) throw new LoomError('adapter_invalid', { id: ref.id, detail: picked.detail })
    const listed = present.filter(
      (probe) => picked.files.includes(probe.file) || !ADAPTER_FILE_NAMES.includes(probe.file),
    )
    const revision = createHash('sha256')
    for (const probe of listed) revision.update(`${probe.file}\0${probe.version}\n`)
    const files: AdapterFileInfo[] = listed.map((probe) =>
      probe.size === undefined ? { path: probe.file } : { path: probe.file, size: probe.size },
    )
    ctx.logger.debug({ source: this.name, id: ref.id, files: files.length }, 'adapter resolved')
    return { source: this.name, id: ref.id, revision: revision.digest('hex').slice(0, 32), files }
  }

  async fetch(resolved: ResolvedAdapter, destDir: string, ctx: SourceContext): Promise<void> {
    for (const file of resolved.files) {
      const target = path.join(destDir, ...file.path.split('/'))
      const response = await this.#request('GET', resolved.id, file.path, ctx.signal, 'adapter_download_failed')
      if (response.status !== 200 || response.body === null) {
        await response.body?.cancel()
        throw this.#downloadError(resolved.id, `${file.path} answered HTTP ${response.status}`)
      }
      try {
        // Creates the folder, cuts a body that outgrows the HEAD size, removes a partial file.
        await downloadFile(response, target, { size: file.size, name: file.path, signal: ctx.signal })
      } catch (err) {
        if (ctx.signal.aborted) throw err
        if (err instanceof DownloadCheckError) throw this.#downloadError(resolved.id, err.message)
        throw this.#downloadError(resolved.id, `${file.path}: ${fetchErrorText(err)}`, err)
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
      const detail = `${method} ${file}: ${fetchErrorText(err)}`
      throw code === 'adapter_source_unavailable'
        ? new LoomError(code, { source: this.name, id, detail }, { cause: err })
        : this.#downloadError(id, detail, err)
    }
  }

  #downloadError(id: string, detail: string, cause?: unknown): LoomError {
    return new LoomError('adapter_download_failed', { id, source: this.name, detail }, { cause })
  }
}
