import { FileDownload, type DownloadBody, type DownloadedFile, type ExpectedFile } from './file-download.ts'

/** What `downloadFile` checks and how it streams. */
export interface DownloadFileOptions extends ExpectedFile {
  /** Stops the transfer; the call then throws `signal.reason`. */
  readonly signal?: AbortSignal
  /** Give up with `DownloadStalledError` when no chunk arrives for this long. */
  readonly idleMs?: number
  /** Called after each chunk is on disk with the file's size so far. */
  readonly onProgress?: (bytes: number) => void
}

/**
 * Stream `body` (a `fetch` Response, a web stream or a Node stream) to `filePath` in one go,
 * creating the parent directories, cutting the transfer as soon as it outgrows `size`, then
 * checking the size and, when given, the SHA-256. On any failure the partial file is deleted and
 * the error thrown: the stream's own, `DownloadCheckError`, `DownloadStalledError`, or
 * `signal.reason`. Sources that resume broken transfers use `FileDownload` instead.
 *
 * ```ts
 * const res = await fetch(url, { signal: ctx.signal })
 * await downloadFile(res, join(destDir, file.path), { ...file, name: file.path, signal: ctx.signal })
 * ```
 */
export async function downloadFile(
  body: DownloadBody,
  filePath: string,
  options: DownloadFileOptions = {},
): Promise<DownloadedFile> {
  const download = new FileDownload(filePath, options)
  try {
    await download.write(body, options)
    return download.verify()
  } catch (err) {
    await download.discard()
    throw err
  }
}
