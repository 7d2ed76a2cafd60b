import { createHash, createHmac, randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseRange } from './byte-range.ts'
import { hubErrors, type HubError } from './hub-error.ts'
import { HubRepo, lfsPointer, readTree, type RepoCommit, type RepoFile } from './hub-repo.ts'

/** How a repository is guarded. */
export interface FakeHubRepoOptions {
  /** Only tokens whose `canRead` names the repo see it (default false). */
  readonly private?: boolean
  /** Metadata is public, file contents need a token whose `canRead` names the repo (default false). */
  readonly gated?: boolean | 'auto' | 'manual'
  /** The branch the files are committed to (default `main`). */
  readonly branch?: string
}

/** What a token may do. */
export interface FakeHubTokenOptions {
  /** Private or gated repos it may read: exact names, or `owner/*`. Public repos are readable by every valid token. */
  readonly canRead?: readonly string[]
  /** The user name `whoami-v2` reports (default `test-user`). */
  readonly user?: string
  readonly role?: 'read' | 'write' | 'admin'
}

/** One request the fake hub received, for assertions. */
export interface HubRequestRecord {
  readonly method: string
  /** Path without the query string, as sent (percent-encoded). */
  readonly path: string
  readonly query: string
  readonly range: string | undefined
  /** The bearer token sent, if any (test tokens only; this is a test server). */
  readonly token: string | undefined
  /** The status answered (0 until the head is written). */
  status: number
}

/** Selects requests by method and URL path (a substring or a pattern). */
export interface RequestMatch {
  readonly method?: string
  readonly url?: string | RegExp
}

/** Selects file-content deliveries by repository and file path. */
export interface FileMatch {
  readonly repo?: string
  readonly path?: string
}

/** A repository's files: a directory on disk, or contents by relative path. */
export type RepoContent = string | Readonly<Record<string, string | Uint8Array>>

interface TokenState {
  readonly canRead: readonly string[]
  readonly user: string
  readonly role: 'read' | 'write' | 'admin'
  readonly createdAt: Date
}

type Caller =
  | { readonly kind: 'anonymous' }
  | { readonly kind: 'invalid' }
  | { readonly kind: 'user'; readonly token: string; readonly info: TokenState }

interface Injection<M> {
  remaining: number
  readonly match: M
  readonly status?: number
  readonly afterBytes?: number
}

/** Content types of text files; everything else is sent as octet-stream. */
const JSON_TYPES: Record<string, string> = { '.json': 'application/json', '.md': 'text/markdown; charset=utf-8' }

function contentType(path: string): string {
  const ext = path.slice(path.lastIndexOf('.'))
  return JSON_TYPES[ext] ?? 'application/octet-stream'
}

function matchesText(value: string, pattern: string | RegExp | undefined): boolean {
  if (pattern === undefined) return true
  return typeof pattern === 'string' ? value.includes(pattern) : pattern.test(value)
}

/**
 * A loopback server speaking the Hugging Face hub's HTTP protocol, as far as `@huggingface/hub`
 * (`modelInfo`, `listFiles`, `pathsInfo`, `fileDownloadInfo`, `downloadFile`, `fileExists`,
 * `whoAmI`, `snapshotDownload`) and Loom's hub source use it:
 *
 * - `GET /api/models/{repo}[/revision/{rev}]` model info (`?expand=` picks fields, as the hub does)
 * - `GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=` listing
 * - `POST /api/models/{repo}/paths-info/{rev}` (JSON or form body `paths`, `expand`)
 * - `GET|HEAD /{repo}/resolve/{rev}/{path}` with Range, ETag and X-Repo-Commit; LFS files answer a
 *   302 to a signed CDN URL carrying `X-Linked-Etag` (the sha256) and `X-Linked-Size`
 * - `GET|HEAD /{repo}/raw/{rev}/{path}` (an LFS file's pointer), `GET /api/whoami-v2`
 *
 * Access follows the real hub: an unknown or revoked token gets 401 on every route; a missing repo,
 * or a private one the caller cannot read, is 401 `RepoNotFound` to anonymous callers and 404
 * `RepoNotFound` to signed-in ones; a gated repo's files are 401/403 `GatedRepo`. Failures can be
 * injected (delay, 5xx answers, a connection dropped halfway through a file, corrupted bytes), and
 * every request is recorded.
 */
export class FakeHub {
  /** Every request received, in arrival order. */
  readonly requests: HubRequestRecord[] = []
  readonly #server: Server
  readonly #repos = new Map<string, HubRepo>()
  readonly #tokens = new Map<string, TokenState>()
  readonly #downloads = new Map<string, number>()
  readonly #secret = randomBytes(16)
  readonly #timers = new Set<NodeJS.Timeout>()
  #failures: Injection<RequestMatch>[] = []
  #drops: Injection<FileMatch>[] = []
  #corruptions: Injection<FileMatch>[] = []
  #delayMs = 0
  #url = ''
  #closing: Promise<void> | null = null

  private constructor() {
    this.#server = createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => {
        // A handler bug must surface in the test, not hang the client.
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' })
        res.end(`fake hub error: ${(err as Error).message}`)
      })
    })
  }

  /** Start a fake hub on `127.0.0.1` and a free port. */
  static async start(): Promise<FakeHub> {
    const hub = new FakeHub()
    await new Promise<void>((resolve, reject) => {
      hub.#server.once('error', reject)
      hub.#server.listen(0, '127.0.0.1', () => resolve())
    })
    hub.#url = `http://127.0.0.1:${(hub.#server.address() as AddressInfo).port}`
    return hub
  }

  /** The base URL (`hub_url`), without a trailing slash. */
  get url(): string {
    return this.#url
  }

  /**
   * Create repository `name` (`owner/repo`) from a directory or a map of files, committed to
   * `options.branch` (default `main`, which always exists: the first commit goes there too).
   * Returns the commit sha.
   */
  async addRepo(name: string, content: RepoContent, options: FakeHubRepoOptions = {}): Promise<string> {
    if (!/^[^/]+\/[^/]+$/.test(name)) throw new Error(`fake hub: repo names are owner/name, got ${name}`)
    if (this.#repos.has(name)) throw new Error(`fake hub: ${name} exists; use pushCommit`)
    const gated = options.gated === true ? 'auto' : (options.gated ?? false)
    const repo = new HubRepo(name, { private: options.private ?? false, gated })
    this.#repos.set(name, repo)
    const files = await toFiles(content)
    const commit = repo.commit(files, 'main')
    if (options.branch !== undefined && options.branch !== 'main') repo.tag(options.branch, commit.sha)
    return commit.sha
  }

  /** Commit new contents (the whole tree) to `branch` of an existing repo; returns the new sha. */
  async pushCommit(
    name: string,
    content: RepoContent,
    options: { branch?: string; title?: string } = {},
  ): Promise<string> {
    const repo = this.#repo(name)
    return repo.commit(await toFiles(content), options.branch ?? 'main', options.title).sha
  }

  /** Point a tag or branch at a commit. */
  tag(name: string, ref: string, sha: string): void {
    this.#repo(name).tag(ref, sha)
  }

  /** Change who may see a repo. */
  setVisibility(name: string, options: Pick<FakeHubRepoOptions, 'private' | 'gated'>): void {
    const repo = this.#repo(name)
    const gated = options.gated === true ? 'auto' : (options.gated ?? repo.settings.gated)
    repo.settings = { private: options.private ?? repo.settings.private, gated }
  }

  /** The commit sha a revision of `name` points at (default `main`). */
  sha(name: string, revision = 'main'): string {
    const commit = this.#repo(name).revision(revision)
    if (!commit) throw new Error(`fake hub: ${name} has no revision ${revision}`)
    return commit.sha
  }

  /** The hub's facts about one file at `main`: git oid, size, and LFS sha256 when stored in LFS. */
  fileInfo(name: string, path: string, revision = 'main'): { oid: string; size: number; sha256?: string } {
    const file = this.#repo(name).revision(revision)?.files.get(path)
    if (!file) throw new Error(`fake hub: ${name}@${revision} has no ${path}`)
    return file.lfs
      ? { oid: file.oid, size: file.content.length, sha256: file.lfs.oid }
      : { oid: file.oid, size: file.content.length }
  }

  /** Accept `token` (it should start with `hf_`, which @huggingface/hub insists on). */
  addToken(token: string, options: FakeHubTokenOptions = {}): void {
    this.#tokens.set(token, {
      canRead: options.canRead ?? [],
      user: options.user ?? 'test-user',
      role: options.role ?? 'read',
      createdAt: new Date(),
    })
  }

  /** Forget `token`: from now on it is answered 401 "Invalid credentials" everywhere. */
  revokeToken(token: string): void {
    this.#tokens.delete(token)
  }

  /**
   * How many times file `path` of `repo` was sent in full (a GET without `Range`, LFS or not).
   * A delivery dropped or corrupted by an injected failure counts too: it started.
   */
  downloads(repo: string, path: string): number {
    return this.#downloads.get(`${repo}\0${path}`) ?? 0
  }

  /** Wait `ms` before answering each request from now on (0 turns it off). */
  setDelay(ms: number): void {
    this.#delayMs = ms
  }

  /** Answer the next `count` requests matching `match` with `status` (default 503) and an error body. */
  failNext(count: number, options: RequestMatch & { status?: number } = {}): void {
    this.#failures.push({ remaining: count, match: options, status: options.status ?? 503 })
  }

  /**
   * Drop the connection during the next `count` full deliveries of a matching file, after
   * `afterBytes` bytes of the body (default: half the file). The headers promise the full length,
   * so the client sees a truncated body and a closed socket.
   */
  dropNext(count: number, options: FileMatch & { afterBytes?: number } = {}): void {
    this.#drops.push({ remaining: count, match: options, afterBytes: options.afterBytes })
  }

  /** Flip one byte in the middle of the next `count` full deliveries of a matching file (same length). */
  corruptNext(count: number, options: FileMatch = {}): void {
    this.#corruptions.push({ remaining: count, match: options })
  }

  /** Stop listening and cut every open connection. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= new Promise<void>((resolve) => {
      for (const timer of this.#timers) clearTimeout(timer)
      this.#timers.clear()
      this.#server.close(() => resolve())
      this.#server.closeAllConnections()
    })
    return this.#closing
  }

  #repo(name: string): HubRepo {
    const repo = this.#repos.get(name)
    if (!repo) throw new Error(`fake hub: no repo ${name}`)
    return repo
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake-hub')
    const auth = req.headers.authorization
    const bearer = auth !== undefined && /^Bearer\s+/i.test(auth) ? auth.replace(/^Bearer\s+/i, '') : undefined
    const record: HubRequestRecord = {
      method: req.method ?? 'GET',
      path: url.pathname,
      query: url.search,
      range: req.headers.range,
      token: bearer,
      status: 0,
    }
    this.requests.push(record)
    const reply = new Reply(req, res, record)
    if (this.#delayMs > 0) await this.#sleep(this.#delayMs)
    if (this.#closing) return void res.destroy()

    const failure = take(
      this.#failures,
      (m) => m.method === undefined || m.method === record.method,
      (m) => matchesText(url.pathname, m.url),
    )
    if (failure) return reply.error(hubErrors.injected(failure.status ?? 503))

    let parts: string[]
    try {
      parts = url.pathname.split('/').slice(1).map(decodeURIComponent)
    } catch {
      return reply.error(hubErrors.badRequest('Malformed URL'))
    }
    const caller = this.#caller(auth, bearer)
    const method = record.method

    if (parts[0] === '__lfs') return this.#serveCdn(reply, parts.slice(1), url.searchParams.get('sig') ?? '')
    if (caller.kind === 'invalid') return reply.error(hubErrors.invalidCredentials())

    if (parts[0] === 'api') {
      if (parts[1] === 'whoami-v2' && parts.length === 2 && method === 'GET') return this.#whoami(reply, caller)
      if (parts[1] === 'models' && parts.length >= 4) {
        const name = `${parts[2]}/${parts[3]}`
        const rest = parts.slice(4)
        if (method === 'GET' && rest.length === 0) return this.#modelInfo(reply, caller, name, 'main', url)
        if (method === 'GET' && rest[0] === 'revision' && rest.length === 2) {
          return this.#modelInfo(reply, caller, name, rest[1]!, url)
        }
        if (method === 'GET' && rest[0] === 'tree' && rest.length >= 2) {
          return this.#tree(reply, caller, name, rest[1]!, rest.slice(2).join('/'), url)
        }
        if (method === 'POST' && rest[0] === 'paths-info' && rest.length === 2) {
          return this.#pathsInfo(reply, caller, name, rest[1]!, await readBody(req))
        }
      }
      return reply.error(hubErrors.routeNotFound())
    }
    if (
      parts.length >= 5 &&
      (parts[2] === 'resolve' || parts[2] === 'raw') &&
      (method === 'GET' || method === 'HEAD')
    ) {
      const name = `${parts[0]}/${parts[1]}`
      return this.#resolve(reply, caller, name, parts[3]!, parts.slice(4).join('/'), parts[2] === 'raw')
    }
    return reply.error(hubErrors.routeNotFound())
  }

  #caller(header: string | undefined, bearer: string | undefined): Caller {
    if (header === undefined) return { kind: 'anonymous' }
    const info = bearer === undefined ? undefined : this.#tokens.get(bearer)
    return info === undefined || bearer === undefined ? { kind: 'invalid' } : { kind: 'user', token: bearer, info }
  }

  #canRead(caller: Caller, repo: HubRepo): boolean {
    if (caller.kind !== 'user') return false
    const [owner] = repo.name.split('/')
    return caller.info.canRead.some((entry) => entry === repo.name || entry === `${owner}/*`)
  }

  /** The repo and commit when `caller` may see them (`content`: may read file bytes), else the hub's error. */
  #access(
    caller: Caller,
    name: string,
    rev: string,
    content: boolean,
  ): { repo: HubRepo; commit: RepoCommit } | HubError {
    const signedIn = caller.kind === 'user'
    const repo = this.#repos.get(name)
    if (!repo || (repo.settings.private && !this.#canRead(caller, repo))) return hubErrors.repoNotFound(signedIn)
    if (content && repo.settings.gated !== false && !this.#canRead(caller, repo)) return hubErrors.gated(name, signedIn)
    const commit = repo.revision(rev)
    if (!commit) return hubErrors.revisionNotFound(rev)
    return { repo, commit }
  }

  #whoami(reply: Reply, caller: Caller): void {
    if (caller.kind !== 'user') return reply.error(hubErrors.notLoggedIn())
    const { user, role, createdAt } = caller.info
    reply.json(200, {
      type: 'user',
      id: hexId(`user:${user}`),
      name: user,
      fullname: user,
      email: `${user}@example.test`,
      emailVerified: true,
      isPro: false,
      canPay: false,
      periodEnd: null,
      avatarUrl: '',
      orgs: [],
      auth: {
        type: 'access_token',
        accessToken: { displayName: 'fake-hub token', role, createdAt: createdAt.toISOString() },
      },
    })
  }

  #modelInfo(reply: Reply, caller: Caller, name: string, rev: string, url: URL): void {
    const found = this.#access(caller, name, rev, false)
    if (!('repo' in found)) return reply.error(found)
    const { repo, commit } = found
    let downloads = 0
    for (const path of commit.files.keys()) downloads += this.downloads(name, path)
    const info: Record<string, unknown> = {
      _id: hexId(`repo:${name}`),
      id: name,
      modelId: name,
      author: name.split('/')[0],
      sha: commit.sha,
      lastModified: commit.date.toISOString(),
      createdAt: repo.createdAt.toISOString(),
      private: repo.settings.private,
      gated: repo.settings.gated,
      disabled: false,
      downloads,
      likes: 0,
      library_name: 'peft',
      tags: ['peft', 'safetensors'],
      pipeline_tag: 'text-generation',
      siblings: [...commit.files.keys()].map((rfilename) => ({ rfilename })),
    }
    // With `expand`, the hub answers `_id`, `id` and the expanded fields only.
    const expand = [...url.searchParams.getAll('expand'), ...url.searchParams.getAll('expand[]')]
    if (expand.length === 0) return reply.json(200, info)
    const picked: Record<string, unknown> = { _id: info._id, id: info.id }
    for (const key of expand) if (key in info) picked[key] = info[key]
    reply.json(200, picked)
  }

  #tree(reply: Reply, caller: Caller, name: string, rev: string, dir: string, url: URL): void {
    const found = this.#access(caller, name, rev, false)
    if (!('repo' in found)) return reply.error(found)
    const recursive = url.searchParams.get('recursive') === 'true'
    const prefix = dir === '' ? '' : `${dir}/`
    if (dir !== '' && ![...found.commit.files.keys()].some((p) => p.startsWith(prefix))) {
      return reply.error(hubErrors.entryNotFound())
    }
    const entries = new Map<string, unknown>()
    for (const file of found.commit.files.values()) {
      if (!file.path.startsWith(prefix)) continue
      const segments = file.path.slice(prefix.length).split('/')
      // Every directory on the way down is an entry of its own (only the first level unless recursive).
      for (let depth = 1; depth < segments.length && (recursive || depth === 1); depth++) {
        const path = prefix + segments.slice(0, depth).join('/')
        entries.set(path, { type: 'directory', oid: hexId(`tree:${found.commit.sha}:${path}`, 40), size: 0, path })
      }
      if (recursive || segments.length === 1) entries.set(file.path, fileEntry(file))
    }
    reply.json(200, [...entries.values()])
  }

  #pathsInfo(
    reply: Reply,
    caller: Caller,
    name: string,
    rev: string,
    body: { paths: string[]; expand: boolean } | null,
  ): void {
    if (body === null) return reply.error(hubErrors.badRequest('Expected a JSON or form body with `paths`'))
    const found = this.#access(caller, name, rev, false)
    if (!('repo' in found)) return reply.error(found)
    const { commit } = found
    const out: unknown[] = []
    for (const path of body.paths) {
      const file = commit.files.get(path)
      if (file) {
        const entry = fileEntry(file)
        out.push(
          body.expand
            ? {
                ...entry,
                lastCommit: { id: commit.sha, title: commit.title, date: commit.date.toISOString() },
                securityFileStatus: { status: 'safe' },
              }
            : entry,
        )
      } else if ([...commit.files.keys()].some((p) => p.startsWith(`${path}/`))) {
        out.push({ type: 'directory', oid: hexId(`tree:${commit.sha}:${path}`, 40), size: 0, path })
      }
    }
    reply.json(200, out)
  }

  #resolve(reply: Reply, caller: Caller, name: string, rev: string, path: string, raw: boolean): void {
    const found = this.#access(caller, name, rev, true)
    if (!('repo' in found)) return reply.error(found)
    const { commit } = found
    const file = commit.files.get(path)
    if (!file) return reply.error(hubErrors.entryNotFound())
    const headers = { etag: `"${file.oid}"`, 'x-repo-commit': commit.sha }
    if (raw && file.lfs) {
      const pointer = lfsPointer(file.lfs.oid, file.lfs.size)
      return this.#serveBytes(reply, name, { ...file, content: pointer, lfs: undefined }, headers, false)
    }
    if (!file.lfs) return this.#serveBytes(reply, name, file, headers, true)
    // LFS: the hub answers with a redirect to its CDN and names the real content in X-Linked-*.
    const cdnPath = ['__lfs', ...name.split('/'), commit.sha, ...path.split('/')].map(encodeURIComponent).join('/')
    reply.redirect(`${this.#url}/${cdnPath}?sig=${this.#sign(name, commit.sha, path)}`, {
      ...headers,
      'x-linked-etag': `"${file.lfs.oid}"`,
      'x-linked-size': String(file.lfs.size),
    })
  }

  /** The CDN behind LFS redirects: no auth, but the URL must carry the hub's signature. */
  #serveCdn(reply: Reply, parts: string[], sig: string): void {
    const [owner, repoName, sha, ...rest] = parts
    const name = `${owner}/${repoName}`
    const path = rest.join('/')
    const repo = this.#repos.get(name)
    const file = repo?.revision(sha ?? '')?.files.get(path)
    if (!file?.lfs || sha === undefined || sig !== this.#sign(name, sha, path)) {
      return reply.error({ status: 403, message: 'Request signature does not match' })
    }
    this.#serveBytes(reply, name, file, { etag: `"${file.lfs.oid}"` }, true)
  }

  /** Send a file (or a range of it), counting full GETs and applying injected drops and corruption. */
  #serveBytes(reply: Reply, repo: string, file: RepoFile, extra: Record<string, string>, counted: boolean): void {
    const { req, res, record } = reply
    const size = file.content.length
    const range = parseRange(req.headers.range, size)
    const headers: Record<string, string | number> = {
      'accept-ranges': 'bytes',
      'content-type': contentType(file.path),
      'x-request-id': randomBytes(8).toString('hex'),
      ...extra,
    }
    if (range === 'unsatisfiable') {
      record.status = 416
      res.writeHead(416, { ...headers, 'content-range': `bytes */${size}` })
      return void res.end()
    }
    if (range !== null) {
      record.status = 206
      const length = range.end - range.start + 1
      res.writeHead(206, {
        ...headers,
        'content-range': `bytes ${range.start}-${range.end}/${size}`,
        'content-length': length,
      })
      return void res.end(req.method === 'HEAD' ? undefined : file.content.subarray(range.start, range.end + 1))
    }
    record.status = 200
    res.writeHead(200, { ...headers, 'content-length': size })
    if (req.method === 'HEAD') return void res.end()
    const key = `${repo}\0${file.path}`
    if (counted) this.#downloads.set(key, (this.#downloads.get(key) ?? 0) + 1)
    const matches = (m: FileMatch) =>
      (m.repo === undefined || m.repo === repo) && (m.path === undefined || m.path === file.path)
    const drop = take(this.#drops, matches)
    if (drop) {
      const cut = Math.min(drop.afterBytes ?? Math.floor(size / 2), Math.max(0, size - 1))
      res.write(file.content.subarray(0, cut), () => res.destroy())
      return
    }
    let body = file.content
    if (take(this.#corruptions, matches)) {
      body = Buffer.from(body)
      const at = Math.floor(body.length / 2)
      body[at] = body[at]! ^ 0xff
    }
    res.end(body)
  }

  #sign(name: string, sha: string, path: string): string {
    return createHmac('sha256', this.#secret).update(`${name}\0${sha}\0${path}`).digest('hex').slice(0, 32)
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#timers.delete(timer)
        resolve()
      }, ms)
      this.#timers.add(timer)
    })
  }
}

/** Writes answers the way the hub words them, and records the status. */
class Reply {
  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly record: HubRequestRecord,
  ) {}

  json(status: number, body: unknown): void {
    const text = JSON.stringify(body)
    this.record.status = status
    this.res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(text),
      'x-request-id': randomBytes(8).toString('hex'),
    })
    this.res.end(this.req.method === 'HEAD' ? undefined : text)
  }

  error(error: HubError): void {
    const text = JSON.stringify({ error: error.message })
    this.record.status = error.status
    this.res.writeHead(error.status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(text),
      'x-request-id': randomBytes(8).toString('hex'),
      'x-error-message': error.message,
      ...(error.code ? { 'x-error-code': error.code } : {}),
    })
    this.res.end(this.req.method === 'HEAD' ? undefined : text)
  }

  redirect(location: string, headers: Record<string, string>): void {
    this.record.status = 302
    this.res.writeHead(302, {
      ...headers,
      location,
      'content-length': 0,
      'x-request-id': randomBytes(8).toString('hex'),
    })
    this.res.end()
  }
}

/** The first injection whose match accepts the request, consumed once; undefined when none applies. */
function take<M>(list: Injection<M>[], ...tests: ((match: M) => boolean)[]): Injection<M> | undefined {
  const found = list.find((entry) => entry.remaining > 0 && tests.every((test) => test(entry.match)))
  if (found) found.remaining--
  return found
}

function fileEntry(file: RepoFile): Record<string, unknown> {
  return {
    type: 'file',
    oid: file.oid,
    size: file.content.length,
    path: file.path,
    ...(file.lfs ? { lfs: { ...file.lfs } } : {}),
  }
}

/** A stable hex id (the hub's `_id` are 24-hex Mongo ids). */
function hexId(text: string, length = 24): string {
  return createHash('sha1').update(text).digest('hex').slice(0, length)
}

async function toFiles(content: RepoContent): Promise<Map<string, Buffer>> {
  if (typeof content === 'string') return readTree(content)
  const files = new Map<string, Buffer>()
  for (const [path, value] of Object.entries(content)) {
    files.set(path, typeof value === 'string' ? Buffer.from(value) : Buffer.from(value))
  }
  return files
}

/** `paths-info` bodies: JSON (`@huggingface/hub`) or a form (`huggingface_hub`). */
async function readBody(req: IncomingMessage): Promise<{ paths: string[]; expand: boolean } | null> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  const text = Buffer.concat(chunks).toString('utf8')
  if ((req.headers['content-type'] ?? '').includes('application/x-www-form-urlencoded')) {
    const form = new URLSearchParams(text)
    return { paths: form.getAll('paths'), expand: form.get('expand') === 'true' || form.get('expand') === 'True' }
  }
  try {
    const json = JSON.parse(text) as { paths?: unknown; expand?: unknown }
    const paths = typeof json.paths === 'string' ? [json.paths] : json.paths
    if (!Array.isArray(paths) || !paths.every((p) => typeof p === 'string')) return null
    return { paths, expand: json.expand === true }
  } catch {
    return null
  }
}
