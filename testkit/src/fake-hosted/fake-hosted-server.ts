import { createReadStream } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import {
  filesFromDir,
  filesFromMap,
  latestVersion,
  type HostedFile,
  type HostedRepo,
  type HostedStatus,
  type HostedVersion,
} from './repository.ts'

/** One request the fake saw. The token itself is never recorded, only whether one was sent. */
export interface HostedRequest {
  readonly method: string
  readonly path: string
  readonly withToken: boolean
  readonly range?: string
  /** The HTTP status the fake answered (0 when the connection was dropped). */
  status: number
}

/** What a token may read. */
interface TokenGrant {
  readonly all: boolean
  readonly repos: Set<string>
}

const PREFIX = '/v2/repos/'

/**
 * A hosted adapter repository on loopback, speaking the protocol `@loom/source-hosted` documents
 * (LoRAX's `pbase` paths): `GET /v2/repos/{repo}` (latest version), `GET /v2/repos/{repo}/version/{v}`
 * (one version: status and files) and `GET /v2/repos/{repo}/version/{v}/files/{path}` (bytes,
 * `Range: bytes=N-` answered with 206). Every route wants `Authorization: Bearer <token>` unless the
 * repo is public.
 *
 * Tests control it directly: repos and versions from directories or byte maps, tokens with
 * per-repo access that can be revoked, a version's training status, download counters, and
 * failures (503 the next N requests, drop the next download mid-file).
 */
export class FakeHostedServer {
  readonly requests: HostedRequest[] = []
  readonly #repos = new Map<string, HostedRepo>()
  readonly #tokens = new Map<string, TokenGrant>()
  readonly #downloads = new Map<string, number>()
  readonly #server: Server
  #failNext = 0
  #failStatus = 503
  #drop: { path: string | undefined; afterBytes: number | undefined } | undefined
  #closed = false

  /** Base URL, e.g. `http://127.0.0.1:41234` (the plugin's `endpoint`). */
  readonly url: string

  private constructor(server: Server) {
    this.#server = server
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  }

  /** Start on 127.0.0.1 with an ephemeral port. */
  static async start(): Promise<FakeHostedServer> {
    const server = createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const fake = new FakeHostedServer(server)
    server.on('request', (req: IncomingMessage, res: ServerResponse) => fake.#handle(req, res))
    return fake
  }

  /** Create a repo; private unless `public` is set. */
  addRepo(name: string, options: { public?: boolean } = {}): void {
    this.#repos.set(name, { name, isPublic: options.public === true, versions: new Map() })
  }

  /**
   * Add version `version` of `repo` (created private if missing), its files read from `dir` or
   * given as bytes. `status` defaults to `completed`.
   */
  async addVersion(
    repo: string,
    version: number,
    content: { dir: string } | { files: Readonly<Record<string, string | Buffer>> },
    status: HostedStatus = 'completed',
  ): Promise<void> {
    if (!this.#repos.has(repo)) this.addRepo(repo)
    const files: HostedFile[] = 'dir' in content ? await filesFromDir(content.dir) : filesFromMap(content.files)
    this.#repos.get(repo)!.versions.set(version, { version, status, files })
  }

  /** Change a version's training status (for example `training` → `completed`). */
  setStatus(repo: string, version: number, status: HostedStatus): void {
    const found = this.#repos.get(repo)?.versions.get(version)
    if (found === undefined) throw new Error(`no version ${repo}/${version}`)
    found.status = status
  }

  /** A token that may read `repos` (`'*'`: every repo). Adding it again replaces its grants. */
  addToken(token: string, repos: readonly string[] | '*'): void {
    this.#tokens.set(token, { all: repos === '*', repos: new Set(repos === '*' ? [] : repos) })
  }

  /** Let an existing token read one more repo. */
  grant(token: string, repo: string): void {
    this.#tokens.get(token)?.repos.add(repo)
  }

  /** Take one repo away from a token (it stays valid: the next request is a 403). */
  deny(token: string, repo: string): void {
    this.#tokens.get(token)?.repos.delete(repo)
  }

  /** Forget the token (the next request with it is a 401). */
  revokeToken(token: string): void {
    this.#tokens.delete(token)
  }

  /** File downloads started for `repo/version` (one file or all of them). Resumed ranges count too. */
  downloads(repo: string, version: number, filePath?: string): number {
    if (filePath !== undefined) return this.#downloads.get(`${repo}/${version}/${filePath}`) ?? 0
    let total = 0
    for (const [key, n] of this.#downloads) if (key.startsWith(`${repo}/${version}/`)) total += n
    return total
  }

  /** Metadata requests (latest or one version) seen for `repo`. */
  metadataRequests(repo: string): number {
    const base = `${PREFIX}${encodeURIComponent(repo)}`
    return this.requests.filter((r) => r.path === base || /^\/version\/[^/]+$/.test(r.path.slice(base.length))).length
  }

  /** Answer the next `n` requests with `status` (default 503) and a JSON error. */
  failNext(n: number, status = 503): void {
    this.#failNext = n
    this.#failStatus = status
  }

  /** Cut the next file download (of `filePath`, or any) after `afterBytes` (default: half the file). */
  dropNextDownload(filePath?: string, afterBytes?: number): void {
    this.#drop = { path: filePath, afterBytes }
  }

  /** Stop listening and destroy every open connection; leaves no handles behind. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://fake')
    const auth = req.headers.authorization
    const token = auth?.startsWith('Bearer ') ? auth.slice('Bearer '.length).trim() : undefined
    const seen: HostedRequest = {
      method: req.method ?? '',
      path: url.pathname,
      withToken: token !== undefined,
      ...(req.headers.range === undefined ? {} : { range: req.headers.range }),
      status: 0,
    }
    this.requests.push(seen)
    const reply = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      seen.status = status
      const text = JSON.stringify(body)
      res.writeHead(status, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
        ...headers,
      })
      res.end(text)
    }
    if (this.#failNext > 0) {
      this.#failNext--
      reply(this.#failStatus, { error: 'injected failure' })
      return
    }
    if (req.method !== 'GET') {
      reply(405, { error: 'only GET is supported' })
      return
    }
    const route = parseRoute(url.pathname)
    if (route === undefined) {
      reply(404, { error: 'no such route' })
      return
    }
    // Authentication first: a bad token is a 401 whatever it asks for.
    const grant = token === undefined ? undefined : this.#tokens.get(token)
    if (token !== undefined && grant === undefined) {
      reply(401, { error: 'invalid or revoked token' }, { 'www-authenticate': 'Bearer error="invalid_token"' })
      return
    }
    const repo = this.#repos.get(route.repo)
    if (repo === undefined) {
      reply(404, { error: `repo ${route.repo} not found` })
      return
    }
    if (!repo.isPublic) {
      if (grant === undefined) {
        reply(401, { error: 'a token is required' }, { 'www-authenticate': 'Bearer' })
        return
      }
      if (!grant.all && !grant.repos.has(repo.name)) {
        reply(403, { error: `the token may not read ${repo.name}` })
        return
      }
    }
    const version = route.version === undefined ? latestVersion(repo) : repo.versions.get(route.version)
    if (version === undefined) {
      reply(404, { error: `version ${route.version ?? 'latest'} of ${repo.name} not found` })
      return
    }
    if (route.file === undefined) {
      reply(200, describe(repo, version))
      return
    }
    const file = version.status === 'completed' ? version.files.find((f) => f.path === route.file) : undefined
    if (file === undefined) {
      reply(404, { error: `file ${route.file} not found in ${repo.name}/${version.version}` })
      return
    }
    this.#sendFile(repo, version, file, req, res, seen)
  }

  #sendFile(
    repo: HostedRepo,
    version: HostedVersion,
    file: HostedFile,
    req: IncomingMessage,
    res: ServerResponse,
    seen: HostedRequest,
  ): void {
    const key = `${repo.name}/${version.version}/${file.path}`
    this.#downloads.set(key, (this.#downloads.get(key) ?? 0) + 1)
    const match = /^bytes=(\d+)-$/.exec(req.headers.range ?? '')
    const start = match === null ? 0 : Number(match[1])
    if (start > file.size) {
      seen.status = 416
      res.writeHead(416, { 'content-range': `bytes */${file.size}` }).end()
      return
    }
    const headers: Record<string, string | number> = {
      'content-type': 'application/octet-stream',
      'content-length': file.size - start,
      etag: `"${file.sha256}"`,
      'accept-ranges': 'bytes',
    }
    if (match !== null) headers['content-range'] = `bytes ${start}-${file.size - 1}/${file.size}`
    const drop = this.#drop !== undefined && (this.#drop.path === undefined || this.#drop.path === file.path)
    const limit = drop ? Math.max(1, this.#drop!.afterBytes ?? Math.floor((file.size - start) / 2)) : Infinity
    if (drop) this.#drop = undefined
    seen.status = drop ? 0 : match === null ? 200 : 206
    res.writeHead(match === null ? 200 : 206, headers)
    const body =
      typeof file.source === 'string'
        ? createReadStream(file.source, { start })
        : Readable.from([file.source.subarray(start)])
    if (!drop) {
      body.pipe(res)
      return
    }
    let sent = 0
    body.on('data', (chunk: Buffer) => {
      if (sent >= limit) return
      const part = chunk.subarray(0, limit - sent)
      sent += part.length
      res.write(part)
      if (sent >= limit) {
        body.destroy()
        // Flush what was written, then cut the connection before the promised length.
        res.socket?.end(() => res.socket?.destroy())
      }
    })
  }
}

/** The JSON document for one version (the answer of both metadata routes). */
function describe(repo: HostedRepo, version: HostedVersion): object {
  return {
    repo: repo.name,
    version: version.version,
    status: version.status,
    files:
      version.status === 'completed'
        ? version.files.map((f) => ({ path: f.path, size: f.size, sha256: f.sha256 }))
        : [],
  }
}

/** `/v2/repos/{repo}[/version/{v}[/files/{path…}]]`, decoded; undefined for anything else. */
function parseRoute(pathname: string): { repo: string; version?: number; file?: string } | undefined {
  if (!pathname.startsWith(PREFIX)) return undefined
  let parts: string[]
  try {
    parts = pathname.slice(PREFIX.length).split('/').map(decodeURIComponent)
  } catch {
    return undefined
  }
  const [repo, keyword, version, files, ...rest] = parts
  if (repo === undefined || repo === '') return undefined
  if (keyword === undefined) return { repo }
  if (keyword !== 'version' || version === undefined || !/^\d+$/.test(version)) return undefined
  if (files === undefined) return { repo, version: Number(version) }
  if (files !== 'files' || rest.length === 0) return undefined
  return { repo, version: Number(version), file: rest.join('/') }
}
