import { createHash } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'

/** Extensions the real hub's default `.gitattributes` stores in LFS. */
const LFS_EXTENSIONS = ['.safetensors', '.bin', '.pt', '.pth', '.ckpt', '.h5', '.msgpack', '.onnx', '.gguf', '.zip']

/** Files above this size must go through LFS on the real hub whatever their extension. */
const LFS_MIN_SIZE = 10 * 1024 * 1024

/** The LFS facts the hub reports for a large file: its sha256 (`oid`), size and pointer-file size. */
export interface LfsInfo {
  readonly oid: string
  readonly size: number
  readonly pointerSize: number
}

/** One file in one commit. `oid` is the git blob sha1 (of the pointer file for LFS files). */
export interface RepoFile {
  readonly path: string
  readonly content: Buffer
  readonly oid: string
  readonly lfs?: LfsInfo
}

/** An immutable snapshot of a repository. */
export interface RepoCommit {
  readonly sha: string
  readonly parent: string | null
  readonly title: string
  readonly date: Date
  /** Files by path (`/` separators), in path order. */
  readonly files: ReadonlyMap<string, RepoFile>
}

/** Who may read a repository and how the hub guards it. */
export interface RepoSettings {
  readonly private: boolean
  /** `false`, or how access requests are approved (`auto`/`manual`), as the hub's API reports it. */
  readonly gated: false | 'auto' | 'manual'
}

/** Git's object id of a blob: sha1 over `blob <size>\0` and the bytes. */
function gitBlobSha1(content: Buffer): string {
  return createHash('sha1').update(`blob ${content.length}\0`).update(content).digest('hex')
}

/** The pointer file git-lfs commits in place of a large file. */
export function lfsPointer(sha256: string, size: number): Buffer {
  return Buffer.from(`version https://git-lfs.github.com/spec/v1\noid sha256:${sha256}\nsize ${size}\n`)
}

/** Whether the hub would store `path` (of `size` bytes) in LFS. */
export function isLfsPath(path: string, size: number): boolean {
  return size >= LFS_MIN_SIZE || LFS_EXTENSIONS.some((ext) => path.endsWith(ext))
}

/** Describe one file as the hub would store it. */
export function repoFile(path: string, content: Buffer): RepoFile {
  if (!isLfsPath(path, content.length)) return { path, content, oid: gitBlobSha1(content) }
  const sha256 = createHash('sha256').update(content).digest('hex')
  const pointer = lfsPointer(sha256, content.length)
  return {
    path,
    content,
    oid: gitBlobSha1(pointer),
    lfs: { oid: sha256, size: content.length, pointerSize: pointer.length },
  }
}

/** Every regular file under `dir`, keyed by its `/`-separated relative path (symlinks are followed). */
export async function readTree(dir: string, prefix = ''): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>()
  const entries = await readdir(dir, { withFileTypes: true })
  for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    const full = join(dir, entry.name)
    const rel = prefix === '' ? entry.name : `${prefix}/${entry.name}`
    if (entry.isDirectory()) {
      for (const [path, content] of await readTree(full, rel)) files.set(path, content)
    } else {
      files.set(rel, await readFile(full))
    }
  }
  return files
}

/**
 * A repository of the fake hub: commits kept in memory, refs (branches and tags) pointing at them.
 * A commit's sha is derived from its parent and its files' oids, so the same content pushed the
 * same way always gets the same sha.
 */
export class HubRepo {
  readonly name: string
  settings: RepoSettings
  readonly createdAt = new Date()
  readonly #commits = new Map<string, RepoCommit>()
  readonly #refs = new Map<string, string>()

  constructor(name: string, settings: RepoSettings) {
    this.name = name
    this.settings = settings
  }

  /** Commit `files` on top of `branch` (created when new) and return the new commit. */
  commit(files: ReadonlyMap<string, Buffer>, branch: string, title = 'Upload adapter'): RepoCommit {
    const parent = this.#refs.get(branch) ?? null
    const byPath = new Map<string, RepoFile>()
    for (const path of [...files.keys()].sort()) byPath.set(path, repoFile(path, files.get(path)!))
    const hash = createHash('sha1').update(`${this.name}\0${parent ?? ''}\0${title}\0`)
    for (const file of byPath.values()) hash.update(`${file.path}\0${file.oid}\0`)
    const commit: RepoCommit = { sha: hash.digest('hex'), parent, title, date: new Date(), files: byPath }
    this.#commits.set(commit.sha, commit)
    this.#refs.set(branch, commit.sha)
    return commit
  }

  /** Point `ref` (a tag or branch) at an existing commit. */
  tag(ref: string, sha: string): void {
    if (!this.#commits.has(sha)) throw new Error(`fake hub: ${this.name} has no commit ${sha}`)
    this.#refs.set(ref, sha)
  }

  /** The commit a revision names: a branch or tag, `HEAD` (= `main`), or a full 40-hex sha. */
  revision(rev: string): RepoCommit | undefined {
    const ref = rev === 'HEAD' ? 'main' : rev
    const sha = this.#refs.get(ref) ?? (/^[0-9a-f]{40}$/.test(ref) ? ref : undefined)
    return sha === undefined ? undefined : this.#commits.get(sha)
  }

  /** The commit `main` points at (every repo has one once added). */
  get head(): RepoCommit {
    return this.revision('main')!
  }
}
