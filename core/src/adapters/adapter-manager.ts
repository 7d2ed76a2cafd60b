import { access, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { AdapterSource } from '../contracts/adapter-source.ts'
import type { AdapterHandle, AdapterKind, AdapterRef, LocalAdapter, ResolvedAdapter } from '../contracts/adapter.ts'
import type { Backend } from '../contracts/backend.ts'
import type { Logger } from '../contracts/logger.ts'
import { LoomError } from '../errors/index.ts'
import type { AdapterCache } from './adapter-cache.ts'
import type { DownloadStatus } from './download-progress.ts'
import type { AuthGate } from './auth-gate.ts'
import { lifetimeController, scopedSignal, type ScopedSignal } from './scoped-signal.ts'
import { AdapterMerger, type MergeInput } from './merge/adapter-merger.ts'
import type { MergedAdaptersRequest } from './merge/merge-params.ts'

export interface AdapterManagerDeps {
  readonly sources: ReadonlyMap<string, AdapterSource>
  readonly auth: AuthGate
  readonly backend: Backend
  readonly cache: AdapterCache
  readonly logger: Logger
  /** Seconds a resolution is reused before the source is asked again; 0: every request. */
  readonly resolveTtlSeconds: number
  /** Called after each adapter load into the backend, with its duration (metrics). */
  readonly onLoaded?: (source: string, seconds: number) => void
}

/** A loaded adapter and the directory its files are in (chat templates are read from it). */
export interface AcquiredAdapter {
  readonly handle: AdapterHandle
  readonly dir: string
  /**
   * A LoRA's own Medusa heads (LoRAX's Medusa+LoRA: `config.json` with `medusa_num_heads` and
   * their weights beside `adapter_config.json`), loaded as an adapter of their own (a slot, the
   * same caches and checks); absent otherwise.
   */
  readonly heads?: AdapterHandle
}

/** Resolutions remembered (for the TTL and `/v1/models`); the oldest goes first beyond this. */
const MAX_RESOLUTIONS = 4096

/** An adapter this server has resolved, for `/v1/models`. */
export interface KnownAdapter {
  readonly source: string
  readonly id: string
  /** Null for adapters a source lists but nobody has used yet. */
  readonly revision: string | null
}

/**
 * Everything between an adapter named in a request and a handle the backend can batch:
 * `authorize (every request) ∥ resolve → fetch (cache, once) → load`. A cached or loaded adapter
 * is still refused to a caller whose token is missing or revoked.
 */
export class AdapterManager {
  readonly #deps: AdapterManagerDeps
  readonly #loading = new Map<string, Promise<AcquiredAdapter>>()
  readonly #resolved = new Map<string, { at: number; value: ResolvedAdapter }>()
  readonly #merger: AdapterMerger
  /** Aborted by `close()`: authorization checks, resolutions, downloads and merges in flight stop. */
  readonly #closed = lifetimeController()

  constructor(deps: AdapterManagerDeps) {
    this.#deps = deps
    this.#merger = new AdapterMerger({
      backend: deps.backend,
      pathFor: (resolved) => deps.cache.pathFor(resolved),
      logger: deps.logger,
    })
  }

  /** Adapter downloads in flight, with their progress (see `AdapterCache.downloads`). */
  downloads(): DownloadStatus[] {
    return this.#deps.cache.downloads()
  }

  /**
   * Server shutdown: stop what is waiting on sources or computing (checks, resolutions, downloads,
   * merges); the requests behind them answer `server_closing` instead of holding the drain.
   */
  close(): void {
    this.#closed.abort(new LoomError('server_closing'))
    this.#deps.auth.close()
    this.#deps.cache.close()
    this.#merger.close()
  }

  /**
   * A request's signal that also fires when the server closes. The caller releases it once the
   * request is done with its source, so nothing per request stays on the server's close signal
   * (`AbortSignal.any` would leave an entry there for every request: see scoped-signal.ts).
   */
  #signalFor(signal: AbortSignal): ScopedSignal {
    return scopedSignal(signal, this.#closed.signal)
  }

  /**
   * What a source's failure means for the caller: `server_closing` once closed and
   * `request_cancelled` once the request's own signal fired (whatever the source threw on the
   * abort: `throwIfAborted` rethrows a plain Error), else `err` itself.
   */
  #closingOr(err: unknown, signal?: AbortSignal): unknown {
    if (this.#closed.signal.aborted) return new LoomError('server_closing')
    if (signal?.aborted) return new LoomError('request_cancelled')
    return err
  }

  /** Source codes this server answers to, for errors and `/info`. */
  sourceNames(): string[] {
    return [...this.#deps.sources.keys()].sort()
  }

  /**
   * Adapters this server offers to every caller, for `/v1/models`: those its listing sources offer
   * (directories under the local roots) and `preloaded` ones (named in its configuration), with
   * their revision once resolved. Adapters callers fetched from other sources (hub, pbase, S3)
   * are not listed: they may be private, and a caller must not learn which private adapters
   * someone else used.
   */
  async known(preloaded: readonly AdapterRef[] = []): Promise<KnownAdapter[]> {
    const revisions = new Map<string, string>()
    for (const { value } of this.#resolved.values()) revisions.set(`${value.source}\0${value.id}`, value.revision)
    const byKey = new Map<string, KnownAdapter>()
    const add = (source: string, id: string) => {
      const key = `${source}\0${id}`
      if (!byKey.has(key)) byKey.set(key, { source, id, revision: revisions.get(key) ?? null })
    }
    for (const ref of preloaded) {
      // Listed under the id it resolved to (a local id is canonicalized), else as configured.
      const resolved = this.#resolved.get(`${ref.source}\0${ref.id}`)?.value
      add(ref.source, resolved?.id ?? ref.id)
    }
    for (const source of this.#deps.sources.values()) {
      const ids = (await source.list?.().catch(() => [])) ?? []
      for (const id of ids) add(source.name, id)
    }
    return [...byKey.values()]
  }

  /**
   * Start authorizing `ref` for `token` now; the returned promise is awaited by the caller before the
   * request joins a batch. Resolves only when access is allowed, with the token to fetch with
   * (`undefined` when a header token was not needed: see `AuthGate.authorize`).
   */
  authorize(
    ref: AdapterRef,
    token: string | undefined,
    options: { fromHeader?: boolean } = {},
  ): Promise<string | undefined> {
    this.#source(ref)
    return this.#deps.auth.authorize(ref, token, options)
  }

  /** Resolve, fetch (once) and load `ref`; does not authorize (see `authorize`). */
  async acquire(ref: AdapterRef, token: string | undefined, signal: AbortSignal): Promise<AcquiredAdapter> {
    const source = this.#source(ref)
    const scoped = this.#signalFor(signal)
    try {
      const ctx = { token, signal: scoped.signal, logger: this.#deps.logger }
      const resolved = await this.#resolve(source, ref, ctx).catch((err: unknown) => {
        throw this.#closingOr(err, signal)
      })
      const key = `${resolved.source}:${resolved.id}@${resolved.revision}`
      let loading = this.#loading.get(key)
      if (!loading) {
        loading = (async () => {
          const dir = await this.#deps.cache.ensure(resolved, source, ctx)
          const kind = await detectKind(dir, ref.id)
          const local: LocalAdapter = { resolved, dir, kind }
          const started = performance.now()
          const handle = await this.#deps.backend.loadAdapter(local)
          // Medusa+LoRA: the heads load under a key of their own (`#medusa` on the revision).
          const heads =
            kind === 'lora' && (await hasMedusaHeads(dir))
              ? await this.#deps.backend.loadAdapter({
                  resolved: { ...resolved, revision: `${resolved.revision}${HEADS_SUFFIX}` },
                  dir,
                  kind: 'medusa',
                })
              : undefined
          this.#deps.onLoaded?.(resolved.source, (performance.now() - started) / 1000)
          return heads === undefined ? { handle, dir } : { handle, dir, heads }
        })()
        // A failed load is not remembered: the next request retries.
        loading.catch(() => this.#loading.delete(key))
        this.#loading.set(key, loading)
      }
      return await loading
    } finally {
      scoped.release()
    }
  }

  /**
   * Resolve and fetch every input of a `merged_adapters` request, then merge them (once per
   * distinct inputs and parameters; see merge/README.md) and load the result. Does not authorize:
   * the caller authorizes every input (see `authorize`).
   */
  async acquireMerged(
    request: MergedAdaptersRequest,
    token: string | undefined,
    signal: AbortSignal,
  ): Promise<AcquiredAdapter> {
    const scoped = this.#signalFor(signal)
    const ctx = { token, signal: scoped.signal, logger: this.#deps.logger }
    const inputs = await Promise.all(
      request.inputs.map(async (ref): Promise<MergeInput> => {
        const source = this.#source(ref)
        const resolved = await this.#resolve(source, ref, ctx)
        return { resolved, dir: await this.#deps.cache.ensure(resolved, source, ctx) }
      }),
    )
      .catch((err: unknown) => {
        throw this.#closingOr(err, signal)
      })
      .finally(() => scoped.release())
    return this.#merger.acquire(inputs, request)
  }

  #source(ref: AdapterRef): AdapterSource {
    const source = this.#deps.sources.get(ref.source)
    if (!source) {
      throw new LoomError(
        'adapter_source_unknown',
        { source: ref.source, known: this.sourceNames().join(', ') || '(none)' },
        { param: 'adapter_source' },
      )
    }
    return source
  }

  async #resolve(
    source: AdapterSource,
    ref: AdapterRef,
    ctx: Parameters<AdapterSource['resolve']>[1],
  ): Promise<ResolvedAdapter> {
    const key = `${ref.source}\0${ref.id}`
    const cached = this.#resolved.get(key)
    const ttlMs = this.#deps.resolveTtlSeconds * 1000
    // An adapter used in place (local directories) resolves with a few stat calls: do it every
    // time, so an edited or replaced directory is never served with its old weights.
    if (cached && cached.value.localDir === undefined && Date.now() - cached.at < ttlMs) return cached.value
    const value = await source.resolve(ref, ctx)
    this.#resolved.delete(key)
    this.#resolved.set(key, { at: Date.now(), value })
    // Keys are ids as requests spell them, and a source may accept many spellings of one adapter
    // (`./a`, `a/`): bounded, oldest resolution dropped first.
    if (this.#resolved.size > MAX_RESOLUTIONS) this.#resolved.delete(this.#resolved.keys().next().value!)
    return value
  }
}

/** Marks the revision (and so the backend key) of a LoRA's own Medusa heads. */
const HEADS_SUFFIX = '#medusa'

/** Whether a LoRA folder also holds Medusa heads: a Medusa `config.json` and its weights file. */
async function hasMedusaHeads(dir: string): Promise<boolean> {
  const config = await readFile(join(dir, 'config.json'), 'utf8').catch(() => null)
  if (config === null || !/"medusa_num_heads"/.test(config)) return false
  return access(join(dir, 'medusa_lm_head.safetensors')).then(
    () => true,
    () => false,
  )
}

/** LoRA adapters carry `adapter_config.json`; Medusa heads carry a `config.json` with `medusa_num_heads`. */
async function detectKind(dir: string, id: string): Promise<AdapterKind> {
  const lora = await readFile(join(dir, 'adapter_config.json'), 'utf8').catch(() => null)
  if (lora !== null) return 'lora'
  const config = await readFile(join(dir, 'config.json'), 'utf8').catch(() => null)
  if (config !== null && /"medusa_num_heads"/.test(config)) return 'medusa'
  throw new LoomError('adapter_invalid', {
    id,
    detail: 'neither adapter_config.json (LoRA) nor a Medusa config.json was found',
  })
}
