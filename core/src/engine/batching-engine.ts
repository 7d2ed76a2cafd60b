import { setImmediate as yieldToEventLoop } from 'node:timers/promises'
import type { AdapterHandle, LocalAdapter } from '../contracts/adapter.ts'
import type {
  Backend,
  BackendCapabilities,
  BackendFinishReason,
  BackendRequest,
  BackendStats,
  GenerationEvent,
} from '../contracts/backend.ts'
import type { Logger } from '../contracts/logger.ts'
import { LORA_MODULES, type ModelSpec, type StepOutput, type StepRunner } from '../contracts/step-runner.ts'
import { LoomError } from '../errors/index.ts'
import { AdapterRegistry, type AdapterCacheStats } from './adapter-registry.ts'
import type { BatchingEngineLimits, BatchingEngineOptions } from './engine-options.ts'
import { EventChannel } from './event-channel.ts'
import { KvBlockAllocator } from './kv-block-allocator.ts'
import type { PlannedRow } from './row-builder.ts'
import { SamplingState } from './sampler/sampling-state.ts'
import { logSumExp } from './sampler/softmax.ts'
import { TokenSampler } from './sampler/token-sampler.ts'
import { Scheduler } from './scheduler.ts'
import { SerialQueue } from './serial-queue.ts'
import { Sequence } from './sequence.ts'

const BASE_QUEUE = 'base'

/** Everything that exists only after `start()`. */
interface Loaded {
  readonly spec: ModelSpec
  readonly capabilities: BackendCapabilities
  readonly allocator: KvBlockAllocator
  readonly scheduler: Scheduler
  readonly sampler: TokenSampler
  readonly adapters: AdapterRegistry
  /** Longest sequence (prompt + generated) allowed. */
  readonly contextLimit: number
}

/**
 * Turns any `StepRunner` into a `Backend`: continuous batching over a paged KV cache, per-adapter
 * fair queues, sampling, stop rules and structured-output masks (see `Scheduler` for the policy).
 * Adapters live in a bounded set of device slots with LRU eviction of unpinned adapters and a host
 * weight cache for reloads (see `AdapterRegistry` for that policy); a handle stays valid across
 * evictions until `unloadAdapter`.
 *
 * One step is in flight at a time; the loop awaits the runner and yields to the event loop between
 * steps, so requests join and leave at step boundaries while the JS thread stays free. Every runner
 * call (load, step, adapter load/unload, close) is serialised through one queue.
 *
 * Lifecycle (after undici's DispatcherBase): `start()` once; `close()` refuses new work and
 * resolves when every accepted request has finished and the runner is closed; `destroy(err)` fails
 * every request now. Both are idempotent, and `close()` after `destroy()` resolves when the runner
 * is closed.
 */
export class BatchingEngine implements Backend {
  private readonly runner: StepRunner
  private readonly limits: BatchingEngineLimits
  private readonly options: BatchingEngineOptions
  private readonly logger: Logger
  private readonly now: () => number
  private readonly runnerQueue = new SerialQueue()
  private readonly active = new Set<Sequence>()

  private loaded: Loaded | null = null
  private startPromise: Promise<void> | null = null
  private closing = false
  private destroyed = false
  private closePromise: Promise<void> | null = null
  private resolveClose: (() => void) | null = null
  private runnerCloseStarted = false
  private loopRunning = false
  private loopScheduled = false
  private nextSeqId = 1

  constructor(options: BatchingEngineOptions) {
    const { limits } = options
    for (const name of ['maxBatchSize', 'maxBatchPrefillTokens', 'maxConcurrentRequests'] as const) {
      if (!Number.isInteger(limits[name]) || limits[name] < 1)
        throw new RangeError(`${name} must be a positive integer`)
    }
    for (const name of ['adapterLoadTimeoutMs', 'hostCacheBytes'] as const) {
      const value = options[name]
      if (value !== undefined && !(Number.isFinite(value) && value >= 0))
        throw new RangeError(`${name} must be a non-negative number`)
    }
    this.runner = options.runner
    this.limits = limits
    this.options = options
    this.logger = options.logger
    this.now = options.now ?? (() => performance.now())
  }

  start(): Promise<void> {
    if (this.startPromise === null) {
      if (this.closing) return Promise.reject(new LoomError('server_closing'))
      this.startPromise = this.runnerQueue.run(() => this.runner.load()).then((spec) => this.onLoaded(spec))
    }
    return this.startPromise
  }

  private onLoaded(spec: ModelSpec): void {
    if (spec.vocabSize < 1 || spec.kvBlockCount < 1 || spec.kvBlockSize < 1 || spec.maxContextLength < 2) {
      throw new LoomError('model_invalid', {
        path: spec.architecture,
        detail: `runner reported vocabSize ${spec.vocabSize}, kvBlockCount ${spec.kvBlockCount}, kvBlockSize ${spec.kvBlockSize}, maxContextLength ${spec.maxContextLength}`,
      })
    }
    const allocator = new KvBlockAllocator(spec.kvBlockCount, spec.kvBlockSize)
    const loraCapable = spec.adapterSlots > 0 && spec.maxLoraRank > 0
    const capabilities: BackendCapabilities = {
      name: this.options.name,
      device: this.options.device ?? spec.device,
      dtype: spec.dtype,
      maxContextLength: spec.maxContextLength,
      vocabSize: spec.vocabSize,
      maxLoraRank: loraCapable ? spec.maxLoraRank : 0,
      loraTargetModules: loraCapable ? [...(this.options.loraTargetModules ?? LORA_MODULES)] : [],
      // Medusa verification is not implemented yet; the core must not send speculators.
      medusa: false,
      structuredOutput: true,
      modelShape: {
        architecture: spec.architecture,
        vocab_size: spec.vocabSize,
        hidden_size: spec.hiddenSize,
        intermediate_size: spec.intermediateSize,
        num_hidden_layers: spec.numLayers,
        num_attention_heads: spec.numHeads,
        num_key_value_heads: spec.numKvHeads,
        head_dim: spec.headDim,
      },
    }
    const adapters = new AdapterRegistry({
      runner: this.runner,
      runnerQueue: this.runnerQueue,
      readAdapter: this.options.readAdapter,
      spec,
      logger: this.logger,
      loadTimeoutMs: this.options.adapterLoadTimeoutMs,
      hostCacheBytes: this.options.hostCacheBytes,
      events: {
        onResident: () => this.kick(),
        onReloadFailed: (key, err) => this.failWaitingFor(key, err),
      },
    })
    // A queued sequence is admitted only once every adapter it names is resident (it holds pins,
    // so they stay resident until it ends); its rows then carry the LoRA slot.
    const adapterSlotOf = (seq: Sequence): number | null => {
      const { adapter, speculator } = seq.request
      if (speculator !== null && adapters.slotOf(speculator) < 0) return null
      if (adapter === null) return -1
      const slot = adapters.slotOf(adapter)
      return slot < 0 ? null : slot
    }
    this.loaded = {
      spec,
      capabilities,
      allocator,
      scheduler: new Scheduler(allocator, this.limits, adapterSlotOf),
      sampler: new TokenSampler(spec.vocabSize),
      adapters,
      contextLimit: Math.min(spec.maxContextLength, this.limits.maxTotalTokens ?? Infinity),
    }
    this.logger.info(
      { kvBlocks: spec.kvBlockCount, kvBlockSize: spec.kvBlockSize, vocabSize: spec.vocabSize },
      'batching engine ready',
    )
  }

  capabilities(): BackendCapabilities {
    return this.requireLoaded().capabilities
  }

  loadAdapter(adapter: LocalAdapter): Promise<AdapterHandle> {
    if (this.closing) return Promise.reject(new LoomError('server_closing'))
    if (this.loaded === null) return Promise.reject(new LoomError('backend_not_ready'))
    return this.loaded.adapters.load(adapter)
  }

  unloadAdapter(handle: AdapterHandle): Promise<void> {
    if (this.loaded === null || this.destroyed) return Promise.resolve()
    return this.loaded.adapters.unload(handle)
  }

  submit(request: BackendRequest): AsyncIterable<GenerationEvent> {
    if (this.closing) throw new LoomError('server_closing')
    const loaded = this.requireLoaded()
    if (this.active.size >= this.limits.maxConcurrentRequests) {
      throw new LoomError('overloaded', {
        detail: `${this.active.size} requests are queued or running (max_concurrent_requests is ${this.limits.maxConcurrentRequests})`,
      })
    }
    const promptLength = request.inputIds.length
    if (promptLength === 0 || promptLength >= loaded.contextLimit) {
      throw new LoomError('bad_request', {
        detail: `the prompt has ${promptLength} tokens; it must have 1 to ${loaded.contextLimit - 1}`,
      })
    }
    for (const id of request.inputIds) {
      if (!Number.isInteger(id) || id < 0 || id >= loaded.spec.vocabSize) {
        throw new LoomError('bad_request', { detail: `token id ${id} is outside the vocabulary` })
      }
    }
    const { adapter, speculator } = request
    if (adapter !== null && speculator !== null && adapter.key !== speculator.key && loaded.adapters.slotCount < 2) {
      // Both must be resident at once to run a single row; that can never happen.
      throw new LoomError('adapter_slots_full', { slots: loaded.adapters.slotCount })
    }
    // Take adapter references last: everything above may throw without cleanup. An adapter that
    // was evicted from its slot starts reloading now; the request waits in its queue meanwhile.
    if (request.adapter !== null) loaded.adapters.acquire(request.adapter)
    if (request.speculator !== null) {
      try {
        loaded.adapters.acquire(request.speculator)
      } catch (err) {
        if (request.adapter !== null) loaded.adapters.release(request.adapter)
        throw err
      }
    }

    let seq: Sequence | null = null
    const channel = new EventChannel<GenerationEvent>(() => {
      if (seq !== null) this.cancel(seq, false)
    })
    seq = new Sequence({
      seqId: this.nextSeqId++,
      request,
      queueKey: request.adapter === null ? BASE_QUEUE : request.adapter.key,
      sampling: new SamplingState(request.sampling, request.inputIds),
      channel,
      submittedAt: this.now(),
    })
    const current = seq
    this.active.add(current)
    loaded.scheduler.enqueue(current)
    if (request.signal.aborted) {
      this.cancel(current, true)
      return channel
    }
    const onAbort = (): void => this.cancel(current, true)
    request.signal.addEventListener('abort', onAbort, { once: true })
    current.detachSignal = () => request.signal.removeEventListener('abort', onAbort)
    this.kick()
    return channel
  }

  stats(): BackendStats {
    const loaded = this.loaded
    if (loaded === null) {
      return { runningRequests: 0, queuedRequests: 0, kvBlocksTotal: 0, kvBlocksFree: 0, loadedAdapters: 0 }
    }
    return {
      runningRequests: loaded.scheduler.runningCount,
      queuedRequests: loaded.scheduler.queuedCount,
      kvBlocksTotal: loaded.allocator.blockCount,
      kvBlocksFree: loaded.allocator.free,
      loadedAdapters: loaded.adapters.loadedCount,
    }
  }

  /** Device-slot and host-cache counters of the adapter LRU (engine-specific; not on `Backend`). */
  adapterStats(): AdapterCacheStats | null {
    return this.loaded?.adapters.stats() ?? null
  }

  close(): Promise<void> {
    if (this.closePromise === null) {
      this.closing = true
      this.closePromise = new Promise<void>((resolve) => {
        this.resolveClose = resolve
      })
      this.maybeFinishClose()
    }
    return this.closePromise
  }

  destroy(err?: Error): void {
    if (this.destroyed) return
    this.destroyed = true
    this.closing = true
    if (this.closePromise === null) {
      this.closePromise = new Promise<void>((resolve) => {
        this.resolveClose = resolve
      })
    }
    const reason = err ?? new LoomError('server_closing')
    // Before failing requests: their released pins must not let a waiting adapter load in.
    this.loaded?.adapters.close(new LoomError('server_closing'))
    for (const seq of [...this.active]) this.fail(seq, reason)
    this.closeRunner()
  }

  // ——— the loop ———

  /** Start the loop on the next macrotask, so submits made in the same tick share the first step. */
  private kick(): void {
    if (this.loopRunning || this.loopScheduled || this.destroyed) return
    this.loopScheduled = true
    setImmediate(() => {
      this.loopScheduled = false
      void this.loop()
    })
  }

  private async loop(): Promise<void> {
    const loaded = this.loaded
    if (loaded === null || this.loopRunning) return
    this.loopRunning = true
    try {
      while (!this.destroyed) {
        const plan = loaded.scheduler.plan()
        for (const seq of plan.unschedulable) {
          this.fail(
            seq,
            new LoomError('generation_error', {
              detail: `the sequence needs more KV cache than the ${loaded.allocator.blockCount} blocks of ${loaded.allocator.blockSize} tokens`,
            }),
          )
        }
        if (plan.rows.length === 0) break
        const startedAt = this.now()
        for (const { seq } of plan.rows) seq.firstScheduledAt ??= startedAt
        let output: StepOutput | null = null
        try {
          const batch = { rows: plan.rows.map((planned) => planned.row), kvCopies: [] }
          output = await this.runnerQueue.run(() => this.runner.step(batch))
        } catch (err) {
          this.logger.error({ err, rows: plan.rows.length }, 'step failed')
          this.failRows(plan.rows, err)
        }
        if (output !== null && !this.destroyed) this.consume(loaded, plan.rows, output)
        // Let timers, I/O and new submits in, even with a runner that resolves instantly.
        await yieldToEventLoop()
      }
    } catch (err) {
      // A bug in the engine itself: fail what is active rather than hang every client.
      this.logger.error({ err }, 'batching loop crashed')
      for (const seq of [...this.active]) this.fail(seq, generationError(err))
    } finally {
      this.loopRunning = false
      this.maybeFinishClose()
    }
  }

  private consume(loaded: Loaded, rows: readonly PlannedRow[], output: StepOutput): void {
    const V = loaded.spec.vocabSize
    let expected = 0
    for (const { row } of rows) expected += row.logitIndices.length
    if (output.logits.length !== expected * V) {
      this.failRows(rows, new Error(`runner returned ${output.logits.length} logits; expected ${expected} × ${V}`))
      return
    }
    let offset = 0
    for (const planned of rows) {
      const { seq, row, chunk } = planned
      const base = offset
      offset += row.logitIndices.length * V
      // Cancelled (or failed) while the step ran: its blocks are already free.
      if (seq.state !== 'running') continue
      seq.cacheLen += chunk
      try {
        if (planned.prefillLogits) this.gatherPrefillLogprobs(seq, row.cacheLen, chunk, output.logits, base, V)
        if (planned.samples) this.sampleNext(loaded, seq, output.logits, base + (row.logitIndices.length - 1) * V)
      } catch (err) {
        this.logger.error({ err, requestId: seq.request.id }, 'sampling failed')
        this.fail(seq, generationError(err))
      }
    }
  }

  /** Logprob of prompt token `p + 1` from the logits at position `p`, for every position of the chunk. */
  private gatherPrefillLogprobs(
    seq: Sequence,
    start: number,
    chunk: number,
    logits: Float32Array,
    base: number,
    V: number,
  ): void {
    const out = seq.prefillTokens!
    for (let i = 0; i < chunk; i++) {
      const target = start + i + 1
      if (target >= seq.promptLength) break
      const rowOffset = base + i * V
      const id = seq.tokens[target]!
      out.push({ id, logprob: logits[rowOffset + id]! - logSumExp(logits, rowOffset, V) })
    }
  }

  private sampleNext(loaded: Loaded, seq: Sequence, logits: Float32Array, offset: number): void {
    const request = seq.request
    if (!seq.prefillDone) {
      seq.prefillDone = true
      if (seq.prefillTokens !== null) {
        seq.channel.push({ type: 'prefill', tokens: seq.prefillTokens })
        seq.prefillTokens = null
      }
    }
    const outcome = loaded.sampler.sample({
      logits,
      offset,
      state: seq.sampling,
      constraint: request.constraint,
      eosTokenIds: request.eosTokenIds,
      topLogprobs: request.topLogprobs,
    })
    if (outcome.kind === 'constraint_done') return this.finish(seq, 'eos_token')
    if (outcome.kind === 'no_token_allowed') {
      return this.fail(seq, new LoomError('generation_error', { detail: 'the output constraint allows no token' }))
    }
    const { token } = outcome
    seq.tokens.push(token.id)
    seq.generated++
    seq.channel.push({ type: 'tokens', tokens: [token] })
    if (request.eosTokenIds.includes(token.id)) this.finish(seq, 'eos_token')
    else if (seq.generated >= request.maxNewTokens || seq.tokens.length >= loaded.contextLimit) {
      this.finish(seq, 'length')
    }
  }

  // ——— endings ———

  private finish(seq: Sequence, reason: BackendFinishReason): void {
    if (!this.active.has(seq)) return
    const queueMs = (seq.firstScheduledAt ?? this.now()) - seq.submittedAt
    seq.channel.push({ type: 'finish', reason, queueMs })
    seq.channel.end()
    this.release(seq)
  }

  private fail(seq: Sequence, err: unknown): void {
    if (!this.active.has(seq)) return
    seq.channel.fail(err)
    this.release(seq)
  }

  /** An adapter reload failed: fail the requests still waiting in their queues for it. */
  private failWaitingFor(key: string, err: LoomError): void {
    for (const seq of [...this.active]) {
      if (seq.state !== 'queued') continue
      if (seq.request.adapter?.key === key || seq.request.speculator?.key === key) this.fail(seq, err)
    }
  }

  private failRows(rows: readonly PlannedRow[], err: unknown): void {
    const error = generationError(err)
    for (const { seq } of rows) this.fail(seq, error)
  }

  /** Abort (`viaSignal`: reported as a `cancelled` finish) or consumer gone (nothing to report). */
  private cancel(seq: Sequence, viaSignal: boolean): void {
    if (!this.active.has(seq)) return
    if (viaSignal) this.finish(seq, 'cancelled')
    else this.release(seq)
  }

  /** Leave the scheduler (blocks freed now), drop adapter references, maybe complete close(). */
  private release(seq: Sequence): void {
    if (!this.active.has(seq)) return
    this.loaded?.scheduler.remove(seq)
    seq.state = 'finished'
    this.active.delete(seq)
    seq.detachSignal?.()
    seq.detachSignal = null
    const adapters = this.loaded?.adapters
    if (adapters !== undefined) {
      if (seq.request.adapter !== null) adapters.release(seq.request.adapter)
      if (seq.request.speculator !== null) adapters.release(seq.request.speculator)
    }
    this.maybeFinishClose()
  }

  private maybeFinishClose(): void {
    if (!this.closing || this.active.size > 0 || this.loopRunning) return
    this.closeRunner()
  }

  private closeRunner(): void {
    if (this.runnerCloseStarted) return
    this.runnerCloseStarted = true
    this.loaded?.adapters.close(new LoomError('server_closing'))
    this.runnerQueue
      .run(() => this.runner.close())
      .catch((err: unknown) => this.logger.error({ err }, 'runner close failed'))
      .finally(() => this.resolveClose?.())
  }

  private requireLoaded(): Loaded {
    if (this.destroyed) throw new LoomError('server_closing')
    if (this.loaded === null) throw new LoomError('backend_not_ready')
    return this.loaded
  }
}

function generationError(err: unknown): LoomError {
  if (err instanceof LoomError && err.code === 'generation_error') return err
  const detail = err instanceof Error ? err.message : String(err)
  return new LoomError('generation_error', { detail }, { cause: err })
}
