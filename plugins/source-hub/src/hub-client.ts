import { HubApiError, InvalidApiResponseFormatError, modelInfo, pathsInfo } from '@huggingface/hub'
import { fetchErrorText } from '@loom/core'
import { HubRequestError } from './hub-request-error.ts'

/** What model info says about a repo at one revision. */
export interface RepoFacts {
  /** The commit the revision points at (40 hex). */
  readonly sha: string
  readonly private: boolean
  readonly gated: false | 'auto' | 'manual'
}

/** One file the hub lists (`paths-info`). */
export interface HubPath {
  readonly path: string
  readonly type: string
  readonly size: number
  /** The LFS sha256 when the file lives in LFS. */
  readonly lfsSha256: string | undefined
}

/** The hub's answer headers that name an error, kept from the failed response. */
interface ErrorHeaders {
  status?: number
  errorCode?: string
}

/**
 * The hub's HTTP API as this plugin uses it. Metadata goes through `@huggingface/hub`
 * (`modelInfo`, `pathsInfo`); file bodies are fetched directly so they can be streamed to disk.
 *
 * The token is added as an `Authorization` header by the `fetch` given to the library rather than
 * passed as `accessToken`: the library only accepts `hf_…` tokens and the hub decides what is
 * valid. Every failure becomes a `HubRequestError` whose message holds no header value. A caller's
 * abort is rethrown as its own reason; `timeoutMs` bounds each metadata request, and each file
 * body's wait for its next chunk.
 */
export class HubClient {
  readonly hubUrl: string
  readonly #timeoutMs: number

  constructor(hubUrl: string, timeoutMs: number) {
    this.hubUrl = hubUrl.replace(/\/+$/, '')
    this.#timeoutMs = timeoutMs
  }

  /** `GET /api/models/{repo}/revision/{rev}`: the commit sha and how the repo is guarded. */
  async modelInfo(repo: string, revision: string | undefined, token: string | undefined, signal: AbortSignal) {
    const what = `model info of ${repo}@${revision ?? 'HEAD'}`
    return this.#call(what, signal, token, async (fetch): Promise<RepoFacts> => {
      const info = await modelInfo({ name: repo, revision, hubUrl: this.hubUrl, additionalFields: ['sha'], fetch })
      if (typeof info.sha !== 'string' || !/^[0-9a-f]{40}$/.test(info.sha)) {
        throw new HubRequestError('format', `${what}: the hub reported no commit sha`)
      }
      return { sha: info.sha, private: info.private === true, gated: info.gated ?? false }
    })
  }

  /** `POST /api/models/{repo}/paths-info/{sha}`: which of `paths` exist, with sizes and LFS sha256. */
  async pathsInfo(repo: string, sha: string, paths: readonly string[], token: string | undefined, signal: AbortSignal) {
    return this.#call(`file list of ${repo}@${sha}`, signal, token, async (fetch): Promise<HubPath[]> => {
      const found = await pathsInfo({ repo, paths: [...paths], revision: sha, hubUrl: this.hubUrl, fetch })
      return found.map((p) => ({ path: p.path, type: p.type, size: p.size, lfsSha256: p.lfs?.oid }))
    })
  }

  /**
   * `HEAD /{repo}/resolve/{rev}/{path}` without following the LFS redirect: succeeds when the caller
   * may read the repo's files (a missing file counts: `EntryNotFound` comes after the access check).
   */
  async probeFiles(repo: string, revision: string, path: string, token: string | undefined, signal: AbortSignal) {
    const url = this.fileUrl(repo, revision, path)
    return this.#call(`access check on ${repo}@${revision}`, signal, token, async (fetch) => {
      const res = await fetch(url, { method: 'HEAD', redirect: 'manual' })
      if (res.ok || (res.status >= 300 && res.status < 400)) return
      if (res.status === 404 && res.headers.get('x-error-code') === 'EntryNotFound') return
      throw statusError(`HEAD ${path}`, res)
    })
  }

  /**
   * `GET /{repo}/resolve/{sha}/{path}`, following the LFS redirect (fetch drops `Authorization`
   * when it leaves the hub's origin). Resolves once headers arrive; `signal` keeps governing the body.
   */
  async openFile(repo: string, sha: string, path: string, token: string | undefined, signal: AbortSignal) {
    const url = this.fileUrl(repo, sha, path)
    try {
      const res = await fetch(url, { headers: authHeaders(token), signal, redirect: 'follow' })
      if (!res.ok || res.body === null) {
        await res.body?.cancel()
        throw statusError(`GET ${path}`, res)
      }
      return res
    } catch (err) {
      if (err instanceof HubRequestError) throw err
      if (signal.aborted) throw signal.reason
      throw new HubRequestError('network', `GET ${path}: ${fetchErrorText(err)}`, { cause: err })
    }
  }

  /** The resolve URL of one file (path segments encoded one by one). */
  fileUrl(repo: string, revision: string, path: string): string {
    const file = path.split('/').map(encodeURIComponent).join('/')
    return `${this.hubUrl}/${repo}/resolve/${encodeURIComponent(revision)}/${file}`
  }

  /**
   * Run one metadata call with a `fetch` that adds the token, the caller's signal and the timeout,
   * and keeps the failed answer's status and `X-Error-Code` (the library's errors drop headers).
   */
  async #call<T>(
    what: string,
    signal: AbortSignal,
    token: string | undefined,
    run: (fetch: typeof globalThis.fetch) => Promise<T>,
  ): Promise<T> {
    const timeout = AbortSignal.timeout(this.#timeoutMs)
    const combined = AbortSignal.any([signal, timeout])
    const seen: ErrorHeaders = {}
    const hubFetch: typeof globalThis.fetch = async (input, init) => {
      const headers = new Headers(init?.headers)
      for (const [name, value] of Object.entries(authHeaders(token))) headers.set(name, value)
      const res = await fetch(input, { ...init, headers, signal: combined })
      if (!res.ok) {
        seen.status = res.status
        seen.errorCode = res.headers.get('x-error-code') ?? undefined
      }
      return res
    }
    try {
      return await run(hubFetch)
    } catch (err) {
      if (err instanceof HubRequestError) throw err
      if (signal.aborted) throw signal.reason
      if (timeout.aborted) throw new HubRequestError('timeout', `${what}: no answer within ${this.#timeoutMs} ms`)
      if (err instanceof HubApiError) {
        const code = seen.errorCode === undefined ? '' : ` ${seen.errorCode}`
        throw new HubRequestError('http', `${what}: the hub answered HTTP ${err.statusCode}${code}`, {
          status: err.statusCode,
          errorCode: seen.errorCode,
        })
      }
      if (err instanceof InvalidApiResponseFormatError || err instanceof SyntaxError) {
        throw new HubRequestError('format', `${what}: unexpected answer (${err.message})`)
      }
      throw new HubRequestError('network', `${what}: ${fetchErrorText(err)}`, { cause: err })
    }
  }
}

function authHeaders(token: string | undefined): Record<string, string> {
  return token === undefined ? {} : { authorization: `Bearer ${token}` }
}

function statusError(what: string, res: Response): HubRequestError {
  const errorCode = res.headers.get('x-error-code') ?? undefined
  return new HubRequestError(
    'http',
    `${what}: the hub answered HTTP ${res.status}${errorCode ? ` ${errorCode}` : ''}`,
    {
      status: res.status,
      errorCode,
    },
  )
}
