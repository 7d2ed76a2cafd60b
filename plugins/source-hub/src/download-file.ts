import { createHash } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import path from 'node:path'
import { Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import type { AdapterFileInfo, Logger } from '@loom/core'
import type { HubClient } from './hub-client.ts'
import { HubRequestError, networkReason } from './hub-request-error.ts'

/** Files at least this large get progress lines in the log. */
const PROGRESS_MIN_BYTES = 32 * 1024 * 1024

export interface DownloadTarget {
  readonly repo: string
  readonly sha: string
  readonly file: AdapterFileInfo
  readonly destDir: string
}

/**
 * Stream one file of a pinned commit into `destDir`, checking its size and (for LFS files) its
 * sha256 on the way, so a damaged body fails here and can be retried. `idleMs` bounds the wait for
 * each chunk; `signal` (the caller's) aborts at once and is rethrown as its own reason.
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
  const dest = path.join(target.destDir, ...file.path.split('/'))
  await mkdir(path.dirname(dest), { recursive: true })
  const idle = new AbortController()
  let timer = setTimeout(() => idle.abort(), idleMs)
  const both = AbortSignal.any([signal, idle.signal])
  const hash = file.sha256 === undefined ? null : createHash('sha256')
  const expected = file.size
  let received = 0
  let nextReport = PROGRESS_MIN_BYTES / 4
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      clearTimeout(timer)
      timer = setTimeout(() => idle.abort(), idleMs)
      received += chunk.length
      hash?.update(chunk)
      if (expected !== undefined && expected >= PROGRESS_MIN_BYTES && received >= nextReport) {
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
      done(null, chunk)
    },
  })
  try {
    const res = await client.openFile(target.repo, target.sha, file.path, token, both)
    const body = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>)
    await pipeline(body, meter, createWriteStream(dest), { signal: both })
  } catch (err) {
    if (signal.aborted) throw signal.reason
    if (idle.signal.aborted) {
      throw new HubRequestError('timeout', `GET ${file.path}: no data for ${idleMs} ms after ${received} bytes`)
    }
    if (err instanceof HubRequestError) throw err
    throw new HubRequestError('network', `GET ${file.path}: ${networkReason(err)} after ${received} bytes`, {
      cause: err,
    })
  } finally {
    clearTimeout(timer)
  }
  if (expected !== undefined && received !== expected) {
    throw new HubRequestError('integrity', `${file.path} has ${received} bytes, the hub listed ${expected}`)
  }
  const digest = hash?.digest('hex')
  if (digest !== undefined && digest !== file.sha256) {
    throw new HubRequestError('integrity', `${file.path} has sha256 ${digest}, the hub listed ${file.sha256}`)
  }
}
