import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import type { AdapterFileInfo } from '../contracts/adapter.ts'

/** Lower-case hex SHA-256 of a file, streamed (adapter weights can be large). */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256')
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer)
  return hash.digest('hex')
}

/**
 * Check that every promised file is present with the promised size and checksum. Returns a
 * description of the first problem, or null when the download is complete and intact.
 */
export async function findDownloadProblem(dir: string, files: readonly AdapterFileInfo[]): Promise<string | null> {
  for (const file of files) {
    const info = await stat(join(dir, file.path)).catch(() => null)
    if (!info?.isFile()) return `file ${file.path} is missing after download`
    if (file.size !== undefined && info.size !== file.size) {
      return `file ${file.path} has ${info.size} bytes, expected ${file.size}`
    }
    if (file.sha256 !== undefined && (await sha256File(join(dir, file.path))) !== file.sha256.toLowerCase()) {
      return `file ${file.path} does not match its SHA-256 checksum`
    }
  }
  return null
}

/** Bytes written so far under `dir` (for progress logs), recursing into subfolders. */
export async function bytesUnder(dir: string): Promise<number> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => [])
  let total = 0
  for (const entry of entries) {
    if (!entry.isFile()) continue
    const info = await stat(join(entry.parentPath, entry.name)).catch(() => null)
    total += info?.size ?? 0
  }
  return total
}
