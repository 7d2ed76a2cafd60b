import { createHash, type Hash } from 'node:crypto'
import { mkdir, open, rm, type FileHandle } from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import { DownloadCheckError, DownloadStalledError } from './download-errors.ts'

/** A body to save: a `fetch` Response, a web stream, or a Node stream (an SDK's response body). */
export type DownloadBody = Response | ReadableStream<Uint8Array> | Readable | null

/** What the source promised about a file; both checks are skipped when unknown. */
export interface ExpectedFile {
  /** Size in bytes: a body that grows past it is cut at once, and `verify()` wants it exactly. */
  readonly size?: number
  /** Lower- or upper-case hex SHA-256 of the whole file, checked by `verify()`. */
  readonly sha256?: string
  /** The file as error messages call it (its path inside the adapter); default: the base name. */
  readonly name?: string
}

/** How to stream one body. */
export interface WriteOptions {
  /**
   * Add the body after the bytes already on disk (the server answered a `Range: bytes=<bytes>-`
   * request with that range); otherwise the file starts over.
   */
  readonly append?: boolean
  /** Stops the transfer; the write then throws `signal.reason`. */
  readonly signal?: AbortSignal
  /** Give up with `DownloadStalledError` when no chunk arrives for this long. */
  readonly idleMs?: number
  /** Called after each chunk is on disk with the file's size so far (progress logs). */
  readonly onProgress?: (bytes: number) => void
}

/** What `verify()` found: the size, and the SHA-256 when one was expected. */
export interface DownloadedFile {
  readonly bytes: number
  readonly sha256?: string
}

/**
 * One file on its way to disk, over as many attempts as a source needs. `bytes` is exactly what is
 * on disk, even after a body broke part-way, so the next attempt can ask for `Range:
 * bytes=<bytes>-` and `write(body, { append: true })`; a running SHA-256 (kept only when one is
 * expected) follows the appends. Parent directories are created on the first write.
 *
 * ```ts
 * const download = new FileDownload(join(destDir, file.path), file)
 * await withRetry(async () => {
 *   const res = await fetch(url, { headers: { range: `bytes=${download.bytes}-` }, signal })
 *   await download.write(res, { append: res.status === 206, signal })
 * }, { attempts: 3, baseMs: 250, signal })
 * download.verify() // DownloadCheckError when the size or the SHA-256 differs
 * ```
 */
export class FileDownload {
  /** Where the file goes. */
  readonly path: string
  readonly #expected: ExpectedFile
  readonly #name: string
  #bytes = 0
  #hash: Hash | null = null
  #folderMade = false

  constructor(filePath: string, expected: ExpectedFile = {}) {
    this.path = filePath
    this.#expected = expected
    this.#name = expected.name ?? path.basename(filePath)
    this.#restart()
  }

  /** Bytes on disk: where a resumed request starts. */
  get bytes(): number {
    return this.#bytes
  }

  /**
   * Stream `body` into the file, chunk by chunk. Throws the stream's own error when it breaks (the
   * bytes before it stay on disk), `DownloadCheckError` as soon as more bytes arrive than
   * `expected.size`, `DownloadStalledError` after `idleMs` without data, and `signal.reason` when
   * `signal` aborts. The body is always consumed or cancelled, so its socket is released.
   */
  async write(body: DownloadBody, options: WriteOptions = {}): Promise<void> {
    const { signal, idleMs } = options
    const stream = toReadable(body)
    // Errors arrive through the reads below; this keeps one that comes while no read is waiting
    // (a connection that breaks while the file is being opened) from becoming an uncaught exception.
    stream?.on('error', () => undefined)
    if (signal?.aborted) {
      stream?.destroy()
      throw signal.reason
    }
    const chunks = stream?.[Symbol.asyncIterator]()
    // The first read starts before the file is opened: when a connection breaks right after its
    // headers, the bytes it delivered are lost unless someone was already reading them.
    let read = chunks?.next()
    read?.catch(() => undefined)
    const append = options.append === true
    if (!append) this.#restart()
    let out: FileHandle
    try {
      out = await this.#open(append)
    } catch (err) {
      stream?.destroy()
      throw err
    }
    const stalled = new AbortController()
    const stop = signal === undefined ? stalled.signal : AbortSignal.any([signal, stalled.signal])
    // Raced against every read: some streams only notice a destroy() once their source speaks again.
    const stopped = new Promise<never>((_resolve, reject) => {
      const fail = () => reject(stop.reason as Error)
      // The signal may have fired while the file was being opened.
      if (stop.aborted) fail()
      else stop.addEventListener('abort', fail, { once: true })
    })
    stopped.catch(() => undefined)
    let timer: NodeJS.Timeout | undefined
    try {
      while (chunks !== undefined && read !== undefined) {
        // Armed only while waiting for the network, so a slow disk is not mistaken for a stall.
        if (idleMs !== undefined) timer = setTimeout(() => stalled.abort(), idleMs)
        const next = await Promise.race([read, stopped])
        clearTimeout(timer)
        if (next.done === true) break
        await this.#append(out, next.value as Uint8Array)
        options.onProgress?.(this.#bytes)
        read = chunks.next()
        read.catch(() => undefined)
      }
    } catch (err) {
      if (signal?.aborted) throw signal.reason
      if (stalled.signal.aborted) throw new DownloadStalledError(this.#name, idleMs ?? 0, this.#bytes, { cause: err })
      throw err
    } finally {
      clearTimeout(timer)
      stream?.destroy()
      await out.close()
    }
  }

  /**
   * Check the finished file against what the source promised: its size, then its SHA-256. Throws
   * `DownloadCheckError`; returns what it measured.
   */
  verify(): DownloadedFile {
    const { size, sha256 } = this.#expected
    if (size !== undefined && this.#bytes !== size) {
      throw new DownloadCheckError(this.#name, 'size', size, this.#bytes)
    }
    if (this.#hash === null || sha256 === undefined) return { bytes: this.#bytes }
    // A copy, so verify() may be called again (a digested hash cannot be read twice).
    const digest = this.#hash.copy().digest('hex')
    if (digest !== sha256.toLowerCase()) throw new DownloadCheckError(this.#name, 'sha256', sha256, digest)
    return { bytes: this.#bytes, sha256: digest }
  }

  /** Delete what is on disk (after the last attempt failed); the next write starts over. */
  async discard(): Promise<void> {
    this.#restart()
    await rm(this.path, { force: true })
  }

  /** The file, for appending or from the start; its folder is made on the first call. */
  async #open(append: boolean): Promise<FileHandle> {
    if (!this.#folderMade) {
      await mkdir(path.dirname(this.path), { recursive: true })
      this.#folderMade = true
    }
    return await open(this.path, append ? 'a' : 'w')
  }

  async #append(out: FileHandle, chunk: Uint8Array): Promise<void> {
    const { size } = this.#expected
    if (size !== undefined && this.#bytes + chunk.length > size) {
      throw new DownloadCheckError(this.#name, 'size', size, this.#bytes + chunk.length)
    }
    for (let offset = 0; offset < chunk.length;) {
      offset += (await out.write(chunk, offset, chunk.length - offset)).bytesWritten
    }
    this.#hash?.update(chunk)
    this.#bytes += chunk.length
  }

  #restart(): void {
    this.#bytes = 0
    this.#hash = this.#expected.sha256 === undefined ? null : createHash('sha256')
  }
}

/** One Node stream for every kind of body (null: no body at all). */
function toReadable(body: DownloadBody): Readable | null {
  if (body === null) return null
  if (body instanceof Readable) return body
  // A Response from any fetch implementation carries its stream in `body`; a stream has `getReader`.
  const web = 'getReader' in body ? body : body.body
  return web === null ? null : Readable.fromWeb(web as WebReadableStream<Uint8Array>)
}
