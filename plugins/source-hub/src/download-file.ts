import path from 'node:path'
import {
  DownloadCheckError,
  DownloadStalledError,
  FileDownload,
  fetchErrorText,
  type AdapterFileInfo,
  type Logger,
} from '@loom/core'
import type { HubClient } from './hub-client.ts'
import { HubRequestError } from './hub-request-error.ts'

/** Files at least this large get progress lines in the log. */
const PROGRESS_MIN_BYTES = 32 * 1024 * 1024

export interface DownloadTarget {
  readonly repo: string
  readonly sha: string
  readonly file: AdapterFileInfo
  readonly destDir: string
}

/**
 * Stream one file of a pinned commit into `destDir` with the core's `FileDownload`, checking its
 * size and (for LFS files) its sha256, so a damaged body fails here as a transient `integrity`
 * error and can be retried. `idleMs` bounds the wait for the answer and for each chunk; `signal`
 * (the caller's) aborts at once and is rethrown as its own reason.
 */
export async function downloadFile(
  client: HubClient,
  target: DownloadTarget,
  token: string | undefined,
  signal: AbortSignal,
  idleMs: number,
  logger: Logger,
): Promise<void> {
  const { file } = target
  const download = new FileDownload(path.join(target.destDir, ...file.path.split('/')), {
    ...(file.size === undefined ? {} : { size: file.size }),
    ...(file.sha256 === undefined ? {} : { sha256: file.sha256 }),
    name: file.path,
  })
  const expected = file.size
  let nextReport = PROGRESS_MIN_BYTES / 4
  const onProgress = (received: number) => {
    if (expected === undefined || expected < PROGRESS_MIN_BYTES || received < nextReport) return
    nextReport += expected / 4
    logger.info(
      {
        repo: target.repo,
        file: file.path,
        received,
        total: expected,
        percent: Math.floor((received / expected) * 100),
      },
      'adapter download progress',
    )
  }
  // The wait for the answer's headers counts as idle time too; the body's chunks are FileDownload's.
  const opening = new AbortController()
  const timer = setTimeout(() => opening.abort(), idleMs)
  try {
    const res = await client.openFile(
      target.repo,
      target.sha,
      file.path,
      token,
      AbortSignal.any([signal, opening.signal]),
    )
    clearTimeout(timer)
    await download.write(res, { signal, idleMs, onProgress })
    download.verify()
  } catch (err) {
    // What arrived before the failure, for the message; the partial file goes (the next try starts over).
    const received = download.bytes
    await download.discard()
    if (signal.aborted) throw signal.reason
    if (opening.signal.aborted || err instanceof DownloadStalledError) {
      throw new HubRequestError('timeout', `GET ${file.path}: no data for ${idleMs} ms after ${received} bytes`)
    }
    if (err instanceof HubRequestError) throw err
    if (err instanceof DownloadCheckError) {
      const found =
        err.check === 'size'
          ? `${err.actual} bytes, the hub listed ${err.expected}`
          : `sha256 ${err.actual}, the hub listed ${err.expected}`
      throw new HubRequestError('integrity', `${file.path} has ${found}`)
    }
    throw new HubRequestError('network', `GET ${file.path}: ${fetchErrorText(err)} after ${received} bytes`, {
      cause: err,
    })
  } finally {
    clearTimeout(timer)
  }
}
