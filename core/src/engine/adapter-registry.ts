import type { AdapterHandle, LocalAdapter } from '../contracts/adapter.ts'
import type { Logger } from '../contracts/logger.ts'
import type { LoraWeights, MedusaWeights, ModelSpec, StepRunner } from '../contracts/step-runner.ts'
import { LoomError } from '../errors/index.ts'
import type { SerialQueue } from './serial-queue.ts'

/** Parses an adapter's files into weights; injected (the adapters module owns the file formats). */
export type ReadAdapter = (adapter: LocalAdapter, spec: ModelSpec) => Promise<LoraWeights | MedusaWeights>

interface Waiter {
  resolve: () => void
  reject: (err: unknown) => void
}

interface AdapterEntry {
  readonly key: string
  /** The one load every caller of the same key awaits. */
  readonly loading: Promise<AdapterHandle>
  handle: AdapterHandle | null
  slot: number
  /** Queued + running requests holding the adapter. */
  refs: number
  /** Callers of `unload` waiting for the slot to be freed; non-null once an unload was requested. */
  unloadWaiters: Waiter[] | null
}

/** `${source}:${id}@${revision}`: the content key of an adapter. */
export function adapterKey(adapter: LocalAdapter): string {
  const { source, id, revision } = adapter.resolved
  return `${source}:${id}@${revision}`
}

/** LoRA rank (max over modules and layers) or Medusa head count. */
export function adapterSize(weights: LoraWeights | MedusaWeights): number {
  if (weights.kind === 'medusa') return weights.numHeads
  let rank = 0
  for (const layer of weights.layers) for (const module of Object.values(layer)) rank = Math.max(rank, module.rank)
  return rank
}

/**
 * Loaded adapters by key, with reference counts. Concurrent loads of one key share one load; an
 * unload waits until no queued or running request holds the adapter. Loading a key whose unload is
 * still pending revives it (the pending unload resolves without freeing the slot).
 */
export class AdapterRegistry {
  private readonly entries = new Map<string, AdapterEntry>()
  private readonly runner: StepRunner
  private readonly runnerQueue: SerialQueue
  private readonly readAdapter: ReadAdapter
  private readonly spec: ModelSpec
  private readonly logger: Logger

  constructor(init: {
    runner: StepRunner
    runnerQueue: SerialQueue
    readAdapter: ReadAdapter
    spec: ModelSpec
    logger: Logger
  }) {
    this.runner = init.runner
    this.runnerQueue = init.runnerQueue
    this.readAdapter = init.readAdapter
    this.spec = init.spec
    this.logger = init.logger
  }

  /** Adapters fully loaded into a slot. */
  get loadedCount(): number {
    let n = 0
    for (const entry of this.entries.values()) if (entry.handle !== null) n++
    return n
  }

  load(adapter: LocalAdapter): Promise<AdapterHandle> {
    const key = adapterKey(adapter)
    const existing = this.entries.get(key)
    if (existing !== undefined) {
      if (existing.unloadWaiters !== null) {
        const waiters = existing.unloadWaiters
        existing.unloadWaiters = null
        for (const waiter of waiters) waiter.resolve()
      }
      return existing.loading
    }
    const entry: AdapterEntry = {
      key,
      loading: this.doLoad(adapter, key),
      handle: null,
      slot: -1,
      refs: 0,
      unloadWaiters: null,
    }
    this.entries.set(key, entry)
    entry.loading.catch(() => {
      // A failed load leaves nothing behind, so a later call retries.
      if (this.entries.get(key) === entry) this.entries.delete(key)
    })
    return entry.loading
  }

  private async doLoad(adapter: LocalAdapter, key: string): Promise<AdapterHandle> {
    const id = adapter.resolved.id
    try {
      const weights = await this.readAdapter(adapter, this.spec)
      const slot = await this.runnerQueue.run(() => this.runner.loadAdapter(weights))
      const handle: AdapterHandle = { key, kind: weights.kind, size: adapterSize(weights) }
      // Publish before the caller's await resumes, so a submit right after the load can acquire it.
      const entry = this.entries.get(key)
      if (entry !== undefined) {
        entry.slot = slot
        entry.handle = handle
      }
      this.logger.info({ adapter: key, kind: handle.kind, size: handle.size, slot }, 'adapter loaded')
      return handle
    } catch (err) {
      if (err instanceof LoomError) throw err
      throw new LoomError('adapter_load_failed', { id, detail: errorDetail(err) }, { cause: err })
    }
  }

  /**
   * Take a reference for a request and return the adapter's slot. Throws when the handle is not
   * loaded or its unload was requested (the handle is no longer valid).
   */
  acquire(handle: AdapterHandle): number {
    const entry = this.entries.get(handle.key)
    if (entry === undefined || entry.handle === null || entry.unloadWaiters !== null) {
      throw new LoomError('internal_error', { detail: `adapter ${handle.key} is not loaded` })
    }
    entry.refs++
    return entry.slot
  }

  /** Drop a request's reference; performs a pending unload when it was the last. */
  release(handle: AdapterHandle): void {
    const entry = this.entries.get(handle.key)
    if (entry === undefined) return
    entry.refs--
    if (entry.refs === 0 && entry.unloadWaiters !== null) this.free(entry)
  }

  /** Unload now if unused, otherwise once the last request holding it ends. Idempotent. */
  unload(handle: AdapterHandle): Promise<void> {
    const entry = this.entries.get(handle.key)
    if (entry === undefined || entry.handle === null) return Promise.resolve()
    return new Promise<void>((resolve, reject) => {
      const waiter = { resolve, reject }
      if (entry.unloadWaiters === null) entry.unloadWaiters = [waiter]
      else entry.unloadWaiters.push(waiter)
      if (entry.refs === 0) this.free(entry)
    })
  }

  private free(entry: AdapterEntry): void {
    const waiters = entry.unloadWaiters ?? []
    entry.unloadWaiters = null
    this.entries.delete(entry.key)
    this.runnerQueue
      .run(() => this.runner.unloadAdapter(entry.slot))
      .then(
        () => {
          this.logger.info({ adapter: entry.key, slot: entry.slot }, 'adapter unloaded')
          for (const waiter of waiters) waiter.resolve()
        },
        (err: unknown) => {
          this.logger.error({ adapter: entry.key, slot: entry.slot, err }, 'adapter unload failed')
          for (const waiter of waiters) waiter.reject(err)
        },
      )
  }
}

function errorDetail(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
