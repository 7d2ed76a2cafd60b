import { createHash } from 'node:crypto'
import { readdir, readFile, stat } from 'node:fs/promises'
import path from 'node:path'

/** Training states a hosted version reports (LoRAX's `pbase` list); only `completed` is usable. */
export type HostedStatus =
  'pending' | 'queued' | 'training' | 'stopping' | 'stopped' | 'canceled' | 'errored' | 'completed'

/** One file of a version: where its bytes come from and what the listing says about them. */
export interface HostedFile {
  readonly path: string
  readonly size: number
  readonly sha256: string
  /** Absolute path on disk, or the bytes themselves. */
  readonly source: string | Buffer
}

export interface HostedVersion {
  readonly version: number
  status: HostedStatus
  readonly files: readonly HostedFile[]
}

export interface HostedRepo {
  readonly name: string
  /** Public repos are readable without a token (a revoked token is still refused). */
  readonly isPublic: boolean
  readonly versions: Map<number, HostedVersion>
}

/** Every regular file under `dir`, with `/`-separated relative paths, sizes and SHA-256. */
export async function filesFromDir(dir: string): Promise<HostedFile[]> {
  const files: HostedFile[] = []
  const walk = async (rel: string): Promise<void> => {
    for (const entry of await readdir(path.join(dir, rel), { withFileTypes: true })) {
      const relPath = rel === '' ? entry.name : `${rel}/${entry.name}`
      if (entry.isDirectory()) await walk(relPath)
      else if (entry.isFile()) {
        const full = path.join(dir, relPath)
        const bytes = await readFile(full)
        files.push({
          path: relPath,
          size: (await stat(full)).size,
          sha256: createHash('sha256').update(bytes).digest('hex'),
          source: full,
        })
      }
    }
  }
  await walk('')
  return files.sort((a, b) => a.path.localeCompare(b.path))
}

/** Files given as bytes: `{ 'adapter_config.json': '{...}' }`. */
export function filesFromMap(map: Readonly<Record<string, string | Buffer>>): HostedFile[] {
  return Object.entries(map).map(([filePath, content]) => {
    const bytes = typeof content === 'string' ? Buffer.from(content) : content
    return {
      path: filePath,
      size: bytes.length,
      sha256: createHash('sha256').update(bytes).digest('hex'),
      source: bytes,
    }
  })
}

/** The version `GET /v2/repos/{repo}` answers: the newest completed one, else the newest. */
export function latestVersion(repo: HostedRepo): HostedVersion | undefined {
  const all = [...repo.versions.values()].sort((a, b) => b.version - a.version)
  return all.find((v) => v.status === 'completed') ?? all[0]
}
