import type { AdapterHandle, LocalAdapter } from '../contracts/adapter.ts'
import type { Logger } from '../contracts/logger.ts'
import type { LoraWeights, MedusaWeights, ModelSpec, StepRunner } from '../contracts/step-runner.ts'
import { LoomError } from '../errors/index.ts'
import { HostWeightCache } from './host-weight-cache.ts'
import type { SerialQueue } from './serial-queue.ts'

/** Parses an adapter's files into weights; injected (the adapters module owns the file formats). */
export type ReadAdapter = (adapter: LocalAdapter, spec: ModelSpec) => Promise<LoraWeights | MedusaWeights>

type Weights = LoraWeights | MedusaWeights

/** How long a device load may wait for a slot when every slot is pinned. */
export const DEFAULT_ADAPTER_LOAD_TIMEOUT_MS = 30_000
/** Host memory for parsed adapter weights kept for reloads (1 GiB). */
export const DEFAULT_HOST_CACHE_BYTES = 1024 ** 3

interface Waiter {
  resolve: () => void
  reject: (err: unknown) => void
}

interface SlotWaiter {
  readonly entry: AdapterEntry
  /** `true`: a slot is reserved for the entry; `false`: nobody needs the load any more. */
  readonly resolve: (reserved: boolean) => void
  readonly reject: (err: unknown) => void
  readonly timer: NodeJS.Timeout
}

interface AdapterEntry {
  readonly key: string
  readonly local: LocalAdapter
  /** The first load (read + device load) every `load()` caller of this key awaits; set at creation. */
  firstLoad: Promise<AdapterHandle> | null
  /** Set once the first load succeeded; from then on the key is known until `unload`. */
  handle: AdapterHandle | null
  /** Device slot, or -1 while not resident (evicted, or not loaded yet). */
  slot: number
  /** A reload in flight (reading, waiting for a slot or copying), or null. */
  reload: Promise<void> | null
  /** Queued + running requests holding the adapter: while > 0 it is pinned to its slot. */
  refs: number
  /** Logical time of the last use (load, acquire, release), for LRU eviction. */
  lastUsed: number
  /** Callers of `unload` waiting for the adapter to be forgotten; non-null once an unload was requested. */
  unloadWaiters: Waiter[] | null
}

/** Counters for `BatchingEngine.adapterStats()`. */
export interface AdapterCacheStats {
  /** Adapters known by key (loaded and not explicitly unloaded), resident or not. */
  readonly known: number
  readonly deviceSlots: number
  /** Adapters currently in a device slot. */
  readonly deviceResident: number
  /** Copies into a device slot (first loads and reloads). */
  readonly deviceLoads: number
  /** Adapters moved out of their slot to make room for another. */
  readonly deviceEvictions: number
  /** Device loads waiting because every slot is pinned. */
  readonly slotWaiters: number
  /** Calls to `readAdapter` (first loads and host-cache misses on reload). */
  readonly reads: number
  /** Reloads served from host memory without reading files. */
  readonly hostCacheHits: number
  readonly hostCacheBytes: number
  readonly hostCacheLimitBytes: number
  readonly hostCacheEntries: number
  readonly hostCacheEvictions: number
}

/** What the registry tells the engine. */
export interface AdapterRegistryEvents {
  /** An adapter became resident: queued requests using it may now be admitted. */
  onResident(key: string): void
  /** Reloading an adapter that queued requests wait for failed; those requests should fail with `err`. */
  onReloadFailed(key: string, err: LoomError): void
}

/** `${source}:${id}@${revision}`: the content key of an adapter. */
export function adapterKey(adapter: LocalAdapter): string {
  const { source, id, revision } = adapter.resolved
  return `${source}:${id}@${revision}`
}

/** LoRA rank (max over modules and layers) or Medusa head count. */
export function adapterSize(weights: Weights): number {
  if (weights.kind === 'medusa') return weights.numHeads
  let rank = 0
  for (const layer of weights.layers) for (const module of Object.values(layer)) rank = Math.max(rank, module.rank)
  return rank
}

/**
 * Known adapters by key, their device slots, and a host-memory cache of their weights.
 *
 * Policy (S-LoRA style: many adapters in host memory, the ones in use on the device):
 * - A handle is a stable key. It stays valid after its adapter leaves the device; only an explicit
 *   `unload` forgets the key (and its host copy). Concurrent loads of one key share one load.
 * - An adapter is **pinned** to its slot while a queued or running request holds it (`refs > 0`).
 *   A device load that finds no free slot evicts the least recently used unpinned resident
 *   adapter (the runner's `unloadAdapter` is queued on the serial runner queue, so it runs between
 *   steps and before the load that takes its slot). Pinning queued requests too means an admitted
 *   or admissible request never loses its slot, and swaps happen only between idle adapters.
 * - When every slot is pinned, the load waits (FIFO with other waiting loads) until a pin drops,
 *   at most `loadTimeoutMs`, then fails with `adapter_slots_full`. Pins always drop eventually:
 *   the requests holding them need nothing but KV memory (their adapter is resident), and the
 *   scheduler admits only requests whose adapter is resident, so requests waiting for a slot never
 *   block others. A wait nobody needs any more (its requests ended) is abandoned.
 * - A request submitted with a known but evicted handle takes a pin and triggers a reload — from
 *   the host cache when its weights are still there, else by reading its files again — and waits in
 *   its queue meanwhile; if the reload fails (or times out) its queued requests fail.
 * - Parsed weights stay in a host LRU bounded by `hostCacheBytes` (typed arrays' byteLength).
 */
export class AdapterRegistry {
  private readonly entries = new Map<string, AdapterEntry>()
  private readonly runner: StepRunner
  private readonly runnerQueue: SerialQueue
  private readonly readAdapter: ReadAdapter
  private readonly spec: ModelSpec
  private readonly logger: Logger
  private readonly events: AdapterRegistryEvents
  private readonly loadTimeoutMs: number
  private readonly host: HostWeightCache
  /** Device slots this registry hands out. */
  private readonly capacity: number
  /** Slots resident or reserved by a load in flight; never above `capacity`. */
  private reserved = 0
  private readonly slotWaiters: SlotWaiter[] = []
  private clock = 0
  private closedWith: LoomError | null = null
  private deviceLoads = 0
  private deviceEvictions = 0
  private reads = 0
  private hostHits = 0

  constructor(init: {
    runner: StepRunner
    runnerQueue: SerialQueue
    readAdapter: ReadAdapter
    spec: ModelSpec
    logger: Logger
    events: AdapterRegistryEvents
    loadTimeoutMs?: number
    hostCacheBytes?: number
  }) {
    this.runner = init.runner
    this.runnerQueue = init.runnerQueue
    this.readAdapter = init.readAdapter
    this.spec = init.spec
    this.logger = init.logger
    this.events = init.events
    this.loadTimeoutMs = init.loadTimeoutMs ?? DEFAULT_ADAPTER_LOAD_TIMEOUT_MS
    this.host = new HostWeightCache(init.hostCacheBytes ?? DEFAULT_HOST_CACHE_BYTES)
    this.capacity = Math.max(0, init.spec.adapterSlots)
  }

  /** Device slots in total (LoRA and Medusa together). */
  get slotCount(): number {
    return this.capacity
  }

  /** Adapters resident in a device slot. */
  get loadedCount(): number {
    let n = 0
    for (const entry of this.entries.values()) if (entry.slot >= 0) n++
    return n
  }

  stats(): AdapterCacheStats {
    let known = 0
    for (const entry of this.entries.values()) if (entry.handle !== null) known++
    return {
      known,
      deviceSlots: this.capacity,
      deviceResident: this.loadedCount,
      deviceLoads: this.deviceLoads,
      deviceEvictions: this.deviceEvictions,
      slotWaiters: this.slotWaiters.length,
      reads: this.reads,
      hostCacheHits: this.hostHits,
      hostCacheBytes: this.host.bytes,
      hostCacheLimitBytes: this.host.limitBytes,
      hostCacheEntries: this.host.size,
      hostCacheEvictions: this.host.evictions,
    }
  }

  /** Slot of a resident adapter, or -1 while it is not resident (or not known). */
  slotOf(handle: AdapterHandle): number {
    return this.entries.get(handle.key)?.slot ?? -1
  }

  load(adapter: LocalAdapter): Promise<AdapterHandle> {
    if (this.closedWith !== null) return Promise.reject(this.closedWith)
    const key = adapterKey(adapter)
    const existing = this.entries.get(key)
    if (existing !== undefined) {
      if (existing.unloadWaiters !== null) {
        const waiters = existing.unloadWaiters
        existing.unloadWaiters = null
        for (const waiter of waiters) waiter.resolve()
      }
      existing.lastUsed = ++this.clock
      return existing.firstLoad!
    }
    const entry: AdapterEntry = {
      key,
      local: adapter,
      firstLoad: null,
      handle: null,
      slot: -1,
      reload: null,
      refs: 0,
      lastUsed: ++this.clock,
      unloadWaiters: null,
    }
    this.entries.set(key, entry)
    const firstLoad = this.doFirstLoad(entry)
    entry.firstLoad = firstLoad
    firstLoad.catch(() => {
      // A failed load leaves nothing behind, so a later call retries.
      if (this.entries.get(key) === entry) this.forget(entry)
    })
    return firstLoad
  }

  private async doFirstLoad(entry: AdapterEntry): Promise<AdapterHandle> {
    try {
      const weights = await this.readWeights(entry)
      const handle: AdapterHandle = {
        key: entry.key,
        id: entry.local.resolved.id,
        kind: weights.kind,
        size: adapterSize(weights),
      }
      await this.loadToDevice(entry, weights)
      // Publish before the caller's await resumes, so a submit right after the load can acquire it.
      entry.handle = handle
      entry.lastUsed = ++this.clock
      return handle
    } catch (err) {
      throw loadError(entry, err)
    }
  }

  /**
   * Take a reference (a pin) for a request. When the adapter was evicted, a reload starts and the
   * request waits until `slotOf` is non-negative. Throws when the handle is not known or its
   * unload was requested (the handle is no longer valid).
   */
  acquire(handle: AdapterHandle): void {
    const entry = this.entries.get(handle.key)
    if (entry === undefined || entry.handle === null || entry.unloadWaiters !== null) {
      throw new LoomError('internal_error', { detail: `adapter ${handle.key} is not loaded` })
    }
    entry.refs++
    entry.lastUsed = ++this.clock
    if (entry.slot < 0) this.startReload(entry)
  }

  /** Drop a request's reference; performs a pending unload when it was the last. */
  release(handle: AdapterHandle): void {
    const entry = this.entries.get(handle.key)
    if (entry === undefined || entry.refs === 0) return
    entry.refs--
    entry.lastUsed = ++this.clock
    if (entry.refs > 0) return
    if (entry.unloadWaiters !== null && entry.reload === null) this.free(entry)
    // The adapter may now be evicted for a waiting load, or its own reload wait is abandoned.
    else this.pump()
  }

  /** Forget the adapter now if unused, otherwise once the last request holding it ends. Idempotent. */
  unload(handle: AdapterHandle): Promise<void> {
    const entry = this.entries.get(handle.key)
    if (entry === undefined || entry.handle === null) return Promise.resolve()
    return new Promise<void>((resolve, reject) => {
      const waiter = { resolve, reject }
      if (entry.unloadWaiters === null) entry.unloadWaiters = [waiter]
      else entry.unloadWaiters.push(waiter)
      if (entry.refs > 0) return
      // A reload in flight finishes (or is abandoned) first; its completion frees the entry.
      if (entry.reload === null) this.free(entry)
      else this.pump()
    })
  }

  /** Fail every load waiting for a slot and drop the host cache; later loads are refused with `err`. */
  close(err: LoomError): void {
    if (this.closedWith !== null) return
    this.closedWith = err
    for (const waiter of this.slotWaiters.splice(0)) {
      clearTimeout(waiter.timer)
      waiter.reject(err)
    }
    this.host.clear()
  }

  // ——— device slots ———

  private startReload(entry: AdapterEntry): void {
    if (entry.slot >= 0 || entry.reload !== null) return
    const reload = (async () => {
      let weights = this.host.get(entry.key)
      if (weights !== undefined) this.hostHits++
      else weights = await this.readWeights(entry)
      await this.loadToDevice(entry, weights)
    })()
    entry.reload = reload
    reload
      .catch((err: unknown) => {
        const error = loadError(entry, err)
        // A capacity refusal (every slot pinned) is not a fault: no stack trace for it.
        if (error.status === 503) this.logger.warn({ adapter: entry.key, code: error.code }, error.message)
        else this.logger.warn({ adapter: entry.key, err: error }, 'adapter reload failed')
        if (this.entries.get(entry.key) === entry && entry.refs > 0) this.events.onReloadFailed(entry.key, error)
      })
      .finally(() => {
        entry.reload = null
        if (this.entries.get(entry.key) !== entry) return
        if (entry.unloadWaiters !== null) {
          if (entry.refs === 0) this.free(entry)
        } else if (entry.refs > 0 && entry.slot < 0) {
          // Acquired again after the reload was abandoned or failed: try again.
          this.startReload(entry)
        }
      })
  }

  /** Reserve a slot (evicting or waiting as needed) and copy `weights` into it. */
  private async loadToDevice(entry: AdapterEntry, weights: Weights): Promise<void> {
    if (!(await this.reserveSlot(entry))) return
    if (this.closedWith !== null) throw this.closedWith
    let slot: number
    try {
      slot = await this.runnerQueue.run(() => this.runner.loadAdapter(weights))
    } catch (err) {
      this.reserved--
      this.pump()
      throw err
    }
    entry.slot = slot
    this.deviceLoads++
    this.logger.info({ adapter: entry.key, slot }, 'adapter loaded')
    if (this.entries.get(entry.key) !== entry) {
      // Forgotten while copying (a failed first load never gets here): give the slot back.
      this.freeSlot(entry)
      return
    }
    if (entry.handle !== null) this.events.onResident(entry.key)
  }

  /** Resolves `true` with a slot reserved for `entry`, or `false` when no request needs it any more. */
  private reserveSlot(entry: AdapterEntry): Promise<boolean> {
    if (this.closedWith !== null) return Promise.reject(this.closedWith)
    if (this.abandoned(entry)) return Promise.resolve(false)
    if (this.capacity === 0) return Promise.reject(this.slotsFull())
    if (this.slotWaiters.length === 0 && this.tryReserve()) return Promise.resolve(true)
    return new Promise<boolean>((resolve, reject) => {
      const waiter: SlotWaiter = {
        entry,
        resolve,
        reject,
        timer: setTimeout(() => {
          const at = this.slotWaiters.indexOf(waiter)
          if (at >= 0) this.slotWaiters.splice(at, 1)
          reject(this.slotsFull())
        }, this.loadTimeoutMs),
      }
      this.slotWaiters.push(waiter)
      this.logger.debug({ adapter: entry.key, waiting: this.slotWaiters.length }, 'adapter waits for a slot')
    })
  }

  /** Take a free slot, or the slot of the least recently used unpinned resident adapter. */
  private tryReserve(): boolean {
    if (this.reserved < this.capacity) {
      this.reserved++
      return true
    }
    let victim: AdapterEntry | null = null
    for (const entry of this.entries.values()) {
      if (entry.slot < 0 || entry.refs > 0) continue
      if (victim === null || entry.lastUsed < victim.lastUsed) victim = entry
    }
    if (victim === null) return false
    // The victim's reservation passes to the caller; its unload is queued before the caller's load.
    this.deviceEvictions++
    this.logger.info({ adapter: victim.key, slot: victim.slot }, 'adapter evicted from its slot')
    this.unloadSlot(victim)
    return true
  }

  /** Serve waiting loads in order while slots can be had; drop waits nobody needs. */
  private pump(): void {
    for (const waiter of [...this.slotWaiters]) {
      if (!this.abandoned(waiter.entry)) continue
      this.slotWaiters.splice(this.slotWaiters.indexOf(waiter), 1)
      clearTimeout(waiter.timer)
      waiter.resolve(false)
    }
    while (this.slotWaiters.length > 0 && this.tryReserve()) {
      const waiter = this.slotWaiters.shift()!
      clearTimeout(waiter.timer)
      waiter.resolve(true)
    }
  }

  /** A reload whose requests all ended (first loads always have a caller waiting). */
  private abandoned(entry: AdapterEntry): boolean {
    return entry.handle !== null && entry.refs === 0
  }

  /** Forget an entry whose refs are 0: free its slot (if resident) and its host copy. */
  private free(entry: AdapterEntry): void {
    const waiters = entry.unloadWaiters ?? []
    entry.unloadWaiters = null
    this.forget(entry)
    if (entry.slot < 0) {
      for (const waiter of waiters) waiter.resolve()
      return
    }
    this.freeSlot(entry).then(
      () => {
        for (const waiter of waiters) waiter.resolve()
      },
      (err: unknown) => {
        for (const waiter of waiters) waiter.reject(err)
      },
    )
  }

  private forget(entry: AdapterEntry): void {
    this.entries.delete(entry.key)
    this.host.delete(entry.key)
  }

  /** Give a resident entry's slot back for good (explicit unload). */
  private freeSlot(entry: AdapterEntry): Promise<void> {
    const done = this.unloadSlot(entry)
    this.reserved--
    // The runner queue is FIFO, so any load this lets in runs after the unload above.
    this.pump()
    return done
  }

  /** Queue the runner's unload of the entry's slot and mark it not resident now. */
  private unloadSlot(entry: AdapterEntry): Promise<void> {
    const slot = entry.slot
    entry.slot = -1
    const done = this.runnerQueue.run(() => this.runner.unloadAdapter(slot))
    done.then(
      () => this.logger.info({ adapter: entry.key, slot }, 'adapter unloaded'),
      (err: unknown) => this.logger.error({ adapter: entry.key, slot, err }, 'adapter unload failed'),
    )
    return done
  }

  private async readWeights(entry: AdapterEntry): Promise<Weights> {
    this.reads++
    const weights = await this.readAdapter(entry.local, this.spec)
    if (this.entries.get(entry.key) === entry) this.host.put(entry.key, weights)
    return weights
  }

  private slotsFull(): LoomError {
    return new LoomError('adapter_slots_full', { slots: this.capacity })
  }
}

function loadError(entry: AdapterEntry, err: unknown): LoomError {
  if (err instanceof LoomError) return err
  const detail = err instanceof Error ? err.message : String(err)
  return new LoomError('adapter_load_failed', { id: entry.local.resolved.id, detail }, { cause: err })
}
