import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { AdapterSource } from '../contracts/adapter-source.ts'
import type { AdapterHandle, AdapterKind, AdapterRef, LocalAdapter } from '../contracts/adapter.ts'
import type { AuthChecker, AuthDecision } from '../contracts/auth-checker.ts'
import type { Backend } from '../contracts/backend.ts'
import type { Logger } from '../contracts/logger.ts'
import { LoomError, isLoomError } from '../errors/index.ts'
import type { AdapterCache } from './adapter-cache.ts'

export interface AdapterManagerDeps {
  readonly sources: ReadonlyMap<string, AdapterSource>
  readonly checkers: ReadonlyMap<string, AuthChecker>
  readonly backend: Backend
  readonly cache: AdapterCache
  readonly logger: Logger
}

/**
 * Everything between an adapter named in a request and a handle the backend can batch:
 * `authorize ∥ resolve → fetch (cache) → load`. Authorization runs on every call — a cached or
 * already loaded adapter is still refused to a caller whose token is missing or revoked.
 */
export class AdapterManager {
  readonly #deps: AdapterManagerDeps
  readonly #loading = new Map<string, Promise<AdapterHandle>>()

  constructor(deps: AdapterManagerDeps) {
    this.#deps = deps
  }

  /** Source codes this server answers to, for errors and `/info`. */
  sourceNames(): string[] {
    return [...this.#deps.sources.keys()].sort()
  }

  /**
   * Start authorizing `ref` for `token` now; the returned promise is awaited by the caller before the
   * request joins a batch. Resolves only when access is allowed.
   */
  authorize(ref: AdapterRef, token: string | undefined, signal: AbortSignal): Promise<void> {
    const checker = this.#deps.checkers.get(ref.source)
    if (!checker) return Promise.resolve()
    return checker.check(ref, token, signal).then(
      (decision) => throwIfDenied(ref, decision),
      (err: unknown) => {
        if (isLoomError(err)) throw err
        throw new LoomError('auth_unavailable', { id: ref.id, detail: (err as Error).message }, { cause: err })
      },
    )
  }

  /** Resolve, fetch (once) and load `ref`; does not authorize (see `authorize`). */
  async acquire(ref: AdapterRef, token: string | undefined, signal: AbortSignal): Promise<AdapterHandle> {
    const source = this.#deps.sources.get(ref.source)
    if (!source) {
      throw new LoomError(
        'adapter_source_unknown',
        { source: ref.source, known: this.sourceNames().join(', ') || '(none)' },
        { param: 'adapter_source' },
      )
    }
    const ctx = { token, signal, logger: this.#deps.logger }
    const resolved = await source.resolve(ref, ctx)
    const key = `${resolved.source}:${resolved.id}@${resolved.revision}`
    let loading = this.#loading.get(key)
    if (!loading) {
      loading = (async () => {
        const dir = await this.#deps.cache.ensure(resolved, source, ctx)
        const local: LocalAdapter = { resolved, dir, kind: await detectKind(dir, ref.id) }
        return this.#deps.backend.loadAdapter(local)
      })()
      // A failed load is not remembered: the next request retries.
      loading.catch(() => this.#loading.delete(key))
      this.#loading.set(key, loading)
    }
    return loading
  }
}

function throwIfDenied(ref: AdapterRef, decision: AuthDecision): void {
  if (decision.allowed) return
  const params = { id: ref.id, detail: decision.message }
  if (decision.reason === 'missing') throw new LoomError('auth_missing', params)
  if (decision.reason === 'invalid') throw new LoomError('auth_invalid', params)
  throw new LoomError('auth_forbidden', params)
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
