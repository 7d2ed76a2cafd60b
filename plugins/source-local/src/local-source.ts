import { createHash } from 'node:crypto'
import { readdir, realpath, stat } from 'node:fs/promises'
import { isAbsolute, join, relative, resolve, sep } from 'node:path'
import {
  ADAPTER_FILE_NAMES,
  LoomError,
  hasAdapterConfig,
  type AdapterRef,
  type AdapterSource,
  type ResolvedAdapter,
} from '@loom/core'

/**
 * Adapters in directories on this machine. An id is a directory, absolute or relative to the first
 * root; it must lie inside one of the configured roots, as written and again after following
 * symlinks, so `..` or a link cannot reach the rest of the disk. An id outside every root as
 * written is refused before the disk is looked at, so the answer cannot tell whether such a
 * directory exists. The resolved id is canonical (relative to the first root when inside it,
 * else the real absolute path): `./kjv`, `kjv/` and the absolute path of `kjv` are one adapter,
 * one cache entry and one slot. The revision is a hash of the names, sizes, modification and
 * change times and inodes of the files the runtime may read (the core's `ADAPTER_FILE_NAMES`; nothing is picked, as
 * the directory is used in place): editing an adapter in place gives it a new cache key.
 */
export class LocalAdapterSource implements AdapterSource {
  readonly name: string
  readonly #roots: readonly string[]

  constructor(name: string, roots: readonly string[]) {
    this.name = name
    this.#roots = roots
  }

  async resolve(ref: AdapterRef): Promise<ResolvedAdapter> {
    const { dir, id } = await this.#inside(ref.id)
    const entries = new Set(await readdir(dir))
    const hash = createHash('sha256')
    const files = []
    for (const name of ADAPTER_FILE_NAMES) {
      if (!entries.has(name)) continue
      const info = await stat(join(dir, name))
      if (!info.isFile()) continue
      // ctime and the inode too: a copy that keeps sizes and mtimes (`cp -p`, `touch -r`) still
      // changes them, and user space cannot set ctime back.
      hash.update(`${name}\0${info.size}\0${info.mtimeMs}\0${info.ctimeMs}\0${info.ino}\0`)
      files.push({ path: name, size: info.size })
    }
    if (files.length === 0) {
      throw new LoomError('adapter_invalid', { id: ref.id, detail: 'the directory holds no adapter files' })
    }
    return { source: this.name, id, revision: hash.digest('hex').slice(0, 16), files, localDir: dir }
  }

  /** Adapter directories directly under each root (ids relative to the first root when they are inside it). */
  async list(): Promise<string[]> {
    const ids: string[] = []
    for (const [i, root] of this.#roots.entries()) {
      const entries = await readdir(root, { withFileTypes: true }).catch(() => [])
      for (const entry of entries) {
        if (!entry.isDirectory()) continue
        const dir = join(root, entry.name)
        if (!hasAdapterConfig(await readdir(dir).catch(() => [] as string[]))) continue
        ids.push(i === 0 ? entry.name : dir)
      }
    }
    return ids.sort()
  }

  async fetch(): Promise<void> {
    // Never called: resolve() sets localDir, so the cache uses the directory in place.
  }

  /**
   * The real directory for `id` and its canonical id, or an error when it is missing or outside
   * every root.
   */
  async #inside(id: string): Promise<{ dir: string; id: string }> {
    const first = this.#roots[0]
    if (first === undefined) {
      throw new LoomError('adapter_id_invalid', { id, source: this.name, detail: 'no local roots are configured' })
    }
    const outside = () =>
      new LoomError('adapter_id_invalid', {
        id,
        source: this.name,
        detail: 'the directory is outside the allowed local roots',
      })
    // Each root as configured and with its own links followed (an id may use either spelling).
    const roots = await Promise.all(
      this.#roots.map(async (root) => ({ root, real: await realpath(root).catch(() => null) })),
    )
    const wanted = isAbsolute(id) ? resolve(id) : resolve(first, id)
    if (!roots.some(({ root, real }) => within(root, wanted) || (real !== null && within(real, wanted))))
      throw outside()
    const dir = await realpath(wanted).catch(() => null)
    if (dir === null || !(await stat(dir)).isDirectory()) {
      throw new LoomError('adapter_not_found', { id, source: this.name })
    }
    // Again after following symlinks: a link inside a root may point anywhere.
    for (const [i, { real }] of roots.entries()) {
      if (real === null || !within(real, dir)) continue
      return { dir, id: i === 0 ? relative(real, dir).split(sep).join('/') || '.' : dir }
    }
    throw outside()
  }
}

/** Whether `path` is `dir` or lies under it (both absolute and normalized). */
function within(dir: string, path: string): boolean {
  const rel = relative(dir, path)
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel))
}
