import { randomBytes } from 'node:crypto'
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { AdapterSource, SourceContext } from '../contracts/adapter-source.ts'
import type { ResolvedAdapter } from '../contracts/adapter.ts'
import { LoomError, isLoomError } from '../errors/index.ts'

const COMPLETE_MARKER = '.loom-complete'

/** Turn an id into one safe path segment (ids may hold `/`, `@`, `:`). */
function segment(text: string): string {
  return encodeURIComponent(text).replace(/%/g, '_')
}

/**
 * The disk cache of fetched adapters, keyed by `(source, id, revision)`. A download goes to a
 * private temporary directory and is renamed into place only when every file is present with the
 * size the source promised, so a partial download is never used. Concurrent requests for one cold
 * adapter share one download.
 */
export class AdapterCache {
  readonly #root: string
  readonly #inflight = new Map<string, Promise<string>>()

  constructor(root: string) {
    this.#root = root
  }

  /** The directory an adapter's files live in once cached. */
  pathFor(resolved: ResolvedAdapter): string {
    return join(this.#root, segment(resolved.source), segment(resolved.id), segment(resolved.revision))
  }

  /** Return the cached directory, downloading it first if needed. */
  async ensure(resolved: ResolvedAdapter, source: AdapterSource, ctx: SourceContext): Promise<string> {
    if (resolved.localDir !== undefined) return resolved.localDir
    const dir = this.pathFor(resolved)
    if (await isComplete(dir)) return dir
    const pending = this.#inflight.get(dir)
    if (pending) return pending
    const download = this.#download(resolved, source, ctx, dir).finally(() => this.#inflight.delete(dir))
    this.#inflight.set(dir, download)
    return download
  }

  async #download(resolved: ResolvedAdapter, source: AdapterSource, ctx: SourceContext, dir: string): Promise<string> {
    const tmp = join(this.#root, '.tmp', `${segment(resolved.id)}-${randomBytes(6).toString('hex')}`)
    await mkdir(tmp, { recursive: true })
    try {
      await source.fetch(resolved, tmp, ctx)
      for (const file of resolved.files) {
        const info = await stat(join(tmp, file.path)).catch(() => null)
        if (!info) throw new Error(`file ${file.path} is missing after download`)
        if (file.size !== undefined && info.size !== file.size) {
          throw new Error(`file ${file.path} has ${info.size} bytes, expected ${file.size}`)
        }
      }
      await writeFile(join(tmp, COMPLETE_MARKER), new Date().toISOString())
      await mkdir(join(dir, '..'), { recursive: true })
      await rename(tmp, dir).catch(async (err: NodeJS.ErrnoException) => {
        // Another process finished the same revision first: theirs is complete, keep it.
        if ((err.code === 'ENOTEMPTY' || err.code === 'EEXIST') && (await isComplete(dir))) return
        throw err
      })
      return dir
    } catch (err) {
      if (isLoomError(err)) throw err
      throw new LoomError(
        'adapter_download_failed',
        { id: resolved.id, source: resolved.source, detail: (err as Error).message },
        { cause: err },
      )
    } finally {
      await rm(tmp, { recursive: true, force: true })
    }
  }
}

async function isComplete(dir: string): Promise<boolean> {
  return (await stat(join(dir, COMPLETE_MARKER)).catch(() => null)) !== null
}
