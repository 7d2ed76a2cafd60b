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
import { IDLE_BACKEND_STATS } from '../contracts/backend.ts'
import type { Logger } from '../contracts/logger.ts'
import {
  LORA_MODULES,
  type KvCopy,
  type ModelSpec,
  type StepBatch,
  type StepOutput,
  type StepRunner,
} from '../contracts/step-runner.ts'
import { LoomError } from '../errors/index.ts'
import { AdapterRegistry, type AdapterCacheStats } from './adapter-registry.ts'
import type { BatchingEngineLimits, BatchingEngineOptions } from './engine-options.ts'
import { EventChannel } from './event-channel.ts'
import { KvBlockAllocator } from './kv-block-allocator.ts'
import { draftFromIds, withLookupChain } from './medusa/draft.ts'
import { DrafterChoice } from './medusa/drafter-choice.ts'
import { branchCompaction, walkVerification, type Sampled } from './medusa/verify.ts'
import { DEFAULT_MEDUSA_CHOICES, MedusaTree } from './medusa/medusa-tree.ts'
import { SpeculationCounters, type SpeculationStats } from './medusa/speculation-stats.ts'
import { lookupDraft, lookupFamily, lookupTree, type PromptLookupOptions } from './medusa/prompt-lookup.ts'
import { TreeFamily } from './medusa/tree-family.ts'
import { AdaptiveTreePolicy, speculationKey } from './medusa/tree-policy.ts'
import type { PlannedRow } from './row-builder.ts'
import { SamplingState } from './sampler/sampling-state.ts'
import { StepResults, type RowOffsets } from './step-results.ts'
import { BackendLifecycle } from '../lifecycle/backend-lifecycle.ts'
import { Scheduler } from './scheduler.ts'
import { SerialQueue } from './serial-queue.ts'
import { Sequence, type Drafter } from './sequence.ts'

const BASE_QUEUE = 'base'
/** Defaults of `SpeculationOptions`. */
const DEFAULT_SPECULATION_MAX_BATCH_SIZE = 32
const DEFAULT_SPECULATION_MAX_TOKENS = 256

/** Everything that exists only after `start()`. */
interface Loaded {
  readonly spec: ModelSpec
  readonly capabilities: BackendCapabilities
  readonly allocator: KvBlockAllocator
  readonly scheduler: Scheduler
  readonly adapters: AdapterRegistry
  /** Longest sequence (prompt + generated) allowed. */
  readonly contextLimit: number
}

const NO_TOKEN_ALLOWED = 'the output constraint allows no token'

/**
 * Turns any `StepRunner` into a `Backend`: continuous batching over a paged KV cache, per-adapter
 * fair queues, sampling state, stop rules and structured-output masks (see `Scheduler` for the policy).
 * Adapters live in a bounded set of device slots with LRU eviction of unpinned adapters and a host
 * weight cache for reloads (see `AdapterRegistry` for that policy); a handle stays valid across
 * evictions until `unloadAdapter`.
 *
 * One step is in flight at a time; the loop awaits the runner and yields to the event loop between
 * steps, so requests join and leave at step boundaries while the JS thread stays free. Every runner
 * call (load, step, adapter load/unload, close) is serialised through one queue.
 *
 * Sampling happens in the runner, where the logits are (`RowSampling`): the engine keeps each
 * request's sampling state (penalty history, how many draws its random stream has made) and
 * grammar state, hands them to each row, and commits the tokens the runner returns.
 *
 * Medusa speculation (requests with a `speculator`): the heads' top-k candidates along a sparse
 * tree (`SpeculationOptions.choices`) are verified in one step with a tree attention mask. The
 * verification rule is **sample-and-match**: the runner samples every node exactly as plain
 * decoding would there (same penalties with the path's tokens, the node's grammar mask, warpers
 * and the draw of the request's own stream at that depth); starting at the root, if a child of
 * the node carries the node's token, it is accepted and the walk continues from it, else the step
 * ends with that token. Every emitted token is therefore the one plain decoding would have
 * produced given the same prefix and random draws: greedy output is identical to greedy decoding,
 * and seeded sampled output is identical to seeded plain sampling (lossless; unlike Medusa's
 * typical acceptance, no ε/α trade quality for speed). Grammar constraints advance token by token
 * inside the walk, so constrained rows speculate too, with no rollback. The accepted branch's KV
 * entries are compacted by `kvCopies` before the next step; rejected branches are simply
 * overwritten. The first token of a step is reported normally, the accepted extra ones with
 * `skipped: true`. The runner walks the tree too and runs the heads once, at the walk's end
 * (`StepOutput.walkEnds`, `draftIds`), so the next draft is exact. Unless
 * `SpeculationOptions.adaptive` is false, `AdaptiveTreePolicy` picks each step's tree (nested
 * trees, re-ranked by measured per-node acceptance, or plain decoding) from measured step times,
 * per (adapter, speculator) key and for the whole step; like everything above, it changes speed
 * only, never the tokens.
 *
 * Prompt lookup (`SpeculationOptions.promptLookup`): a request without Medusa heads drafts a chain
 * of the tokens that followed the latest earlier occurrence of its last n-gram (`lookupDraft`),
 * verified by the same sample-and-match walk, with no head logits.
 *
 * Lifecycle (after undici's DispatcherBase): `start()` once; `close()` refuses new work and
 * resolves when every accepted request has finished and the runner is closed; `destroy(err)` fails
 * every request now. Both are idempotent, and `close()` after `destroy()` resolves when the runner
 * is closed.
 */
export class BatchingEngine extends BackendLifecycle implements Backend {
  private readonly runner: StepRunner
  private readonly limits: BatchingEngineLimits
  private readonly options: BatchingEngineOptions
  private readonly logger: Logger
  private readonly now: () => number
  private readonly onStep: BatchingEngineOptions['onStep']
  private readonly runnerQueue = new SerialQueue()
  private readonly active = new Set<Sequence>()

  private loaded: Loaded | null = null
  private startPromise: Promise<void> | null = null
  private loopRunning = false
  private loopScheduled = false
  private nextSeqId = 1
  private readonly speculationCounters = new SpeculationCounters()
  private readonly tree: MedusaTree
  /** Most candidates any head proposes in the full tree (drafts need that many ids a head row). */
  private readonly draftTopK: number
  private readonly choices: readonly (readonly number[])[]
  /** The full tree's family when the policy is off (with it, every key has its own family). */
  private readonly treeFamily: TreeFamily
  private readonly treePolicy: AdaptiveTreePolicy | null
  /** Prompt lookup for rows without heads, its chain tree and that tree's family; null when off. */
  private readonly promptLookup: {
    readonly options: PromptLookupOptions
    readonly tree: MedusaTree
    readonly family: TreeFamily
  } | null
  /** Heads or prompt lookup for requests that have heads, learned per key; null: heads always. */
  private readonly drafterChoice: DrafterChoice | null
  private readonly speculationMaxBatchSize: number
  private readonly speculationMaxTokens: number

  constructor(options: BatchingEngineOptions) {
    super()
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
    const speculation = options.speculation ?? {}
    for (const name of ['maxBatchSize', 'maxTokens'] as const) {
      const value = speculation[name]
      if (value !== undefined && !(Number.isInteger(value) && value >= 0))
        throw new RangeError(`speculation.${name} must be a non-negative integer`)
    }
    const choices = speculation.choices ?? DEFAULT_MEDUSA_CHOICES
    this.tree = new MedusaTree(choices)
    this.draftTopK = Math.max(0, ...this.tree.topKPerHead)
    this.choices = choices
    this.treeFamily = new TreeFamily(this.tree, choices)
    this.speculationMaxBatchSize = speculation.maxBatchSize ?? DEFAULT_SPECULATION_MAX_BATCH_SIZE
    // With speculation off (a batch-size limit of 0) nothing would read the policy's step costs,
    // and recording them was ~5 µs of every step.
    this.treePolicy =
      speculation.adaptive === false || this.speculationMaxBatchSize === 0 ? null : new AdaptiveTreePolicy()
    const lookup = speculation.promptLookup
    if (lookup !== undefined) {
      for (const name of ['ngramSize', 'draftTokens'] as const) {
        if (!Number.isInteger(lookup[name]) || lookup[name] < 0 || lookup[name] > 64)
          throw new RangeError(`speculation.promptLookup.${name} must be an integer from 0 to 64`)
      }
    }
    if (lookup !== undefined && lookup.draftTokens > 0 && lookup.ngramSize > 0) {
      const tree = lookupTree(lookup.draftTokens)
      this.promptLookup = { options: lookup, tree, family: lookupFamily(tree) }
    } else {
      this.promptLookup = null
    }
    const choice = speculation.drafterChoice ?? 'learned'
    if (choice !== 'learned' && choice !== 'heads')
      throw new RangeError(`speculation.drafterChoice must be 'learned' or 'heads' (got ${String(choice)})`)
    this.drafterChoice = this.promptLookup !== null && choice === 'learned' ? new DrafterChoice() : null
    this.speculationMaxTokens = speculation.maxTokens ?? DEFAULT_SPECULATION_MAX_TOKENS
    this.runner = options.runner
    this.limits = limits
    this.options = options
    this.logger = options.logger
    this.now = options.now ?? (() => performance.now())
    this.onStep = options.onStep
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
      adapterSlots: loraCapable ? spec.adapterSlots : 0,
      loraTargetModules: loraCapable ? [...(this.options.loraTargetModules ?? LORA_MODULES)] : [],
      // Medusa heads take an adapter slot.
      medusa: spec.adapterSlots > 0,
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
    const contextLimit = Math.min(spec.maxContextLength, this.limits.maxTotalTokens ?? Infinity)
    const speculation = {
      familyOf: (seq: Sequence, key: string) => this.familyOf(seq, key),
      maxBatchSize: this.speculationMaxBatchSize,
      maxTokens: this.speculationMaxTokens,
      contextLimit,
      // A request with heads that drafts by prompt lookup (`DrafterChoice`) runs no heads.
      medusaSlotOf: (seq: Sequence) =>
        seq.request.speculator === null || seq.drafter !== 'medusa' ? -1 : adapters.slotOf(seq.request.speculator),
      lookupDraft: (seq: Sequence) => lookupDraft(seq.tokens, this.promptLookup!.options, this.promptLookup!.tree),
      lookupNgram: this.promptLookup?.options.ngramSize ?? 0,
      policy: this.treePolicy,
    }
    this.loaded = {
      spec,
      capabilities,
      allocator,
      scheduler: new Scheduler(allocator, this.limits, spec.vocabSize, adapterSlotOf, speculation),
      adapters,
      contextLimit,
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
        detail: `${this.active.size} sequences are queued or running (max_concurrent_requests is ${this.limits.maxConcurrentRequests}; each choice of a request with n > 1 or a prompt list counts as one)`,
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
    if (adapter !== null && adapter.kind !== 'lora') {
      throw new LoomError('bad_request', { detail: `adapter ${adapter.key} is a ${adapter.kind} adapter, not a LoRA` })
    }
    if (speculator !== null && speculator.kind !== 'medusa') {
      throw new LoomError('bad_request', {
        detail: `speculator ${speculator.key} is a ${speculator.kind} adapter, not Medusa`,
      })
    }
    if (adapter !== null && speculator !== null && adapter.key !== speculator.key && loaded.adapters.slotCount < 2) {
      // Both must be resident at once to run a single row; that can never happen.
      throw new LoomError('adapter_slots_full', { slots: loaded.adapters.slotCount })
    }
    const constraints = request.grammar === null ? null : (this.options.constraints?.() ?? null)
    if (request.grammar !== null && constraints === null) {
      throw new LoomError('grammar_unsupported', { detail: 'this server has no structured-output engine' })
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
      ...this.drafterOf(request),
    })
    const current = seq
    this.active.add(current)
    if (request.signal.aborted) {
      this.cancel(current, true)
      return channel
    }
    const onAbort = (): void => this.cancel(current, true)
    request.signal.addEventListener('abort', onAbort, { once: true })
    current.detachSignal = () => request.signal.removeEventListener('abort', onAbort)
    if (constraints === null) {
      loaded.scheduler.enqueue(current)
      this.kick()
    } else {
      // The grammar compiled when the core checked it (a cache hit): the matcher is ready in a
      // moment, and the sequence queues then. Cancelled meanwhile, it never queues.
      constraints.create(request.grammar!).then(
        (constraint) => {
          if (!this.active.has(current)) return constraint.dispose()
          current.constraint = constraint
          loaded.scheduler.enqueue(current)
          this.kick()
        },
        (err: unknown) => {
          if (this.active.has(current)) this.fail(current, err)
        },
      )
    }
    return channel
  }

  stats(): BackendStats {
    const loaded = this.loaded
    if (loaded === null) return IDLE_BACKEND_STATS
    const { running, waiting } = loaded.scheduler.adaptersInUse()
    return {
      runningRequests: loaded.scheduler.runningCount,
      queuedRequests: loaded.scheduler.queuedCount,
      kvBlocksTotal: loaded.allocator.blockCount,
      kvBlocksFree: loaded.allocator.free,
      loadedAdapters: loaded.adapters.loadedCount,
      runningAdapters: running,
      waitingAdapters: waiting,
    }
  }

  /**
   * Medusa counters since start: verification rows, tokens emitted and accepted, the accepted-count
   * histogram and acceptance per head (engine-specific; not on `Backend`).
   */
  speculationStats(): SpeculationStats {
    return this.speculationCounters.snapshot()
  }

  /** Device-slot and host-cache counters of the adapter LRU (engine-specific; not on `Backend`). */
  adapterStats(): AdapterCacheStats | null {
    return this.loaded?.adapters.stats() ?? null
  }

  // ——— lifecycle (BackendLifecycle: close drains, destroy fails all) ———

  protected isIdle(): boolean {
    return this.active.size === 0 && !this.loopRunning
  }

  protected failAll(reason: Error): void {
    // Before failing requests: their released pins must not let a waiting adapter load in.
    this.loaded?.adapters.close(new LoomError('server_closing'))
    for (const seq of [...this.active]) this.fail(seq, reason)
  }

  protected async shutdown(): Promise<void> {
    this.loaded?.adapters.close(new LoomError('server_closing'))
    await this.runnerQueue
      .run(() => this.runner.close())
      .catch((err: unknown) => this.logger.error({ err }, 'runner close failed'))
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
        // The policy's cost model times whole decode steps (plan, runner, sampling), on the real
        // clock rather than the injectable `now`.
        const stepStart = performance.now()
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
        let batch: StepBatch | null = null
        try {
          const kvCopies: KvCopy[] = []
          for (const { kvCopy } of plan.rows) if (kvCopy !== null) kvCopies.push(kvCopy)
          let topLogprobs = 0
          for (const { row } of plan.rows) topLogprobs = Math.max(topLogprobs, row.sampling?.topLogprobs ?? 0)
          batch = {
            rows: plan.rows.map((planned) => planned.row),
            kvCopies,
            topLogprobs,
            draftTopK: Math.max(1, this.draftTopK),
          }
          const runStart = performance.now()
          try {
            output = await this.runnerQueue.run(() => this.runner.step(batch!))
          } finally {
            this.onStep?.({
              method: plan.rows.every(isDecodeRow) ? 'decode' : 'prefill',
              size: plan.rows.length,
              durationS: (performance.now() - runStart) / 1000,
              ok: output !== null,
            })
          }
        } catch (err) {
          this.logger.error({ err, rows: plan.rows.length }, 'step failed')
          this.failRows(plan.rows, err)
        }
        if (output !== null && !this.destroyed) {
          this.consume(loaded, plan.rows, output, batch!)
          this.recordStepCost(plan.rows, performance.now() - stepStart)
        }
        // Let timers, I/O and new submits in, even with a runner that resolves instantly.
        await yieldToEventLoop()
      }
    } catch (err) {
      // A bug in the engine itself: fail what is active rather than hang every client.
      this.logger.error({ err }, 'batching loop crashed')
      for (const seq of [...this.active]) this.fail(seq, generationError(err))
    } finally {
      this.loopRunning = false
      this.workDone()
    }
  }

  /**
   * What drafts for a request: its Medusa heads -- or, with prompt lookup on, whichever of its
   * heads and prompt lookup the drafter choice picks for its key; else prompt lookup when
   * configured, except for sampling under an output constraint (which the core keeps from
   * speculating: see `GenerationService`); else nothing.
   */
  private drafterOf(request: BackendRequest): { drafter?: Drafter; policyKey?: string; choiceKey?: string } {
    const adapterKey = request.adapter?.key ?? null
    // Sampled rows accept far fewer candidates than greedy ones: they learn apart.
    const { temperature, topK } = request.sampling
    const mode = temperature > 0 && topK !== 1 ? '|sampled' : ''
    const lookupAllowed = this.promptLookup !== null && !(request.grammar !== null && temperature > 0)
    const lookupKey = speculationKey(adapterKey, 'prompt-lookup') + mode
    if (request.speculator !== null) {
      const headsKey = speculationKey(adapterKey, request.speculator.key) + mode
      if (this.drafterChoice === null || !lookupAllowed) return { drafter: 'medusa', policyKey: headsKey }
      // A request's decode speed depends on how many share its steps: each drafter is judged
      // against the other at the same load (this request and those running or queued now).
      const choiceKey = `${headsKey}|${loadBucket(this.active.size + 1)}`
      const drafter = this.drafterChoice.choose(choiceKey)
      return { drafter, policyKey: drafter === 'medusa' ? headsKey : lookupKey, choiceKey }
    }
    if (!lookupAllowed) return {}
    return { drafter: 'prompt-lookup', policyKey: lookupKey }
  }

  /** The candidate trees of a sequence's draft under policy `key` (see `SchedulerSpeculation.familyOf`). */
  private familyOf(seq: Sequence, key: string): TreeFamily {
    const lookup = seq.drafter === 'prompt-lookup' ? this.promptLookup : null
    const policy = this.treePolicy
    if (policy === null) return lookup?.family ?? this.treeFamily
    return policy.family(key, () =>
      lookup !== null ? lookupFamily(lookup.tree) : new TreeFamily(this.tree, this.choices),
    )
  }

  /** Feed a decode-only step's time to the adaptive tree policy (prefill steps would skew it). */
  private recordStepCost(rows: readonly PlannedRow[], ms: number): void {
    const policy = this.treePolicy
    if (policy === null) return
    // The policy's own exploration book-keeping is not what the step costs (see there).
    ms -= policy.takeExplorationMs()
    let work = 0
    let tree = false
    for (const planned of rows) {
      const { row, treeNodes } = planned
      tree ||= treeNodes > 0
      if (!isDecodeRow(planned)) return
      work += row.tokens.length + row.medusaHeads
    }
    policy.recordStep(work, ms, tree, rows.length)
  }

  private consume(loaded: Loaded, rows: readonly PlannedRow[], output: StepOutput, batch: StepBatch): void {
    const results = StepResults.check(rows, output, batch)
    if (typeof results === 'string') {
      this.failRows(rows, new Error(`runner returned ${results}`))
      return
    }
    for (const [rowIndex, planned] of rows.entries()) {
      const { seq, chunk } = planned
      const at = results.rowAt(rowIndex)
      // Cancelled (or failed) while the step ran: its blocks are already free.
      if (seq.state !== 'running') continue
      seq.cacheLen += chunk
      try {
        if (planned.prefillLogits) this.gatherPrefillLogprobs(seq, planned.row.scoreTargets, output.scores, at.score)
        if (planned.treeNodes > 0) {
          this.verify(planned, results, at, output.walkEnds[rowIndex]!)
        } else if (planned.samples) {
          this.sampleNext(seq, results, at.sampled)
          this.nextDraft(seq, planned, output, at.draft, batch.draftTopK)
        }
      } catch (err) {
        this.logger.error({ err, requestId: seq.request.id }, 'sampling failed')
        this.fail(seq, generationError(err))
      }
    }
  }

  /**
   * The next draft of a row that keeps decoding: its heads' best ids where its sampling ended
   * (`StepOutput.draftIds` from `draftAt`); none when the row ran no heads (the policy chose plain
   * decoding) or drafts by prompt lookup (searched when the next step is planned, if the policy
   * wants a draft then: `SchedulerSpeculation.lookupDraft`).
   */
  private nextDraft(seq: Sequence, planned: PlannedRow, output: StepOutput, draftAt: number, k: number): void {
    if (seq.state !== 'running') return
    if (planned.row.medusaSlot < 0) {
      seq.draft = null
      return
    }
    const heads = draftFromIds(this.tree, planned.row.medusaHeads, output.draftIds, draftAt, k)
    // With prompt lookup on, a full n-gram match puts its continuation on the heads' top-1 path.
    const lookup = this.promptLookup
    const { grammar, sampling } = seq.request
    const chain =
      lookup === null || (grammar !== null && sampling.temperature > 0)
        ? null
        : lookupDraft(seq.tokens, lookup.options, lookup.tree, lookup.options.ngramSize)
    seq.draft = chain === null ? heads : withLookupChain(this.tree, heads, chain, output.draftIds, draftAt, k)
  }

  /**
   * Sample-and-match over a verification row (see the class comment): walk from the root, taking
   * each node's token as the runner sampled it (as plain decoding would choose it there) and
   * following the child that carries it. Stop rules apply to every token, so a run can end inside
   * the accepted branch. The accepted nodes' cache entries are queued for compaction; the heads at
   * the walk's end (the runner walked the same way: `walkEnd`) give the next draft.
   */
  private verify(planned: PlannedRow, results: StepResults, at: RowOffsets, walkEnd: number): void {
    const { seq, row, treeNodes } = planned
    const subTree = planned.subTree!
    const { tree } = subTree
    const { emitted, accepted, node, ending } = walkVerification(
      tree,
      treeNodes,
      row.tokens,
      (n) => this.take(seq, results, at.sampled + n),
      (id) => this.stopReason(seq, id),
      (n, next) => this.treePolicy?.recordChildren(seq.treeKey, subTree, n, treeNodes, next),
    )
    this.speculationCounters.recordVerify(tree.depth[treeNodes - 1]!, treeNodes - 1, accepted.length, emitted.length)
    if (emitted.length > 0) seq.channel.push({ type: 'tokens', tokens: [...emitted] })
    if (ending === 'none') return this.fail(seq, new LoomError('generation_error', { detail: NO_TOKEN_ALLOWED }))
    if (ending !== null) return this.finish(seq, ending)
    // Root is committed (chunk 1); the accepted candidates move up into the branch's places.
    seq.pendingCopy = branchCompaction(row.cacheLen, accepted)
    seq.cacheLen += accepted.length
    if (walkEnd !== node && seq.drafter === 'medusa') {
      // The runner's walk must end where this one does (both follow the same sampled tokens);
      // should they differ, its heads ran elsewhere: decode the next step without a draft.
      this.logger.warn({ requestId: seq.request.id, walkEnd, node }, 'runner walk ended at another node')
      seq.draft = null
      return
    }
    this.nextDraft(seq, planned, results.output, at.draft, results.draftTopK)
  }

  /** Logprob of prompt token `p + 1` at every position `p` of the chunk that has one (`scoreTargets`). */
  private gatherPrefillLogprobs(seq: Sequence, targets: Int32Array, scores: Float32Array, at: number): void {
    const out = seq.prefillTokens!
    for (const id of targets) if (id >= 0) out.push({ id, logprob: scores[at++]! })
  }

  private sampleNext(seq: Sequence, results: StepResults, at: number): void {
    if (!seq.prefillDone) {
      seq.prefillDone = true
      if (seq.prefillTokens !== null) {
        seq.channel.push({ type: 'prefill', tokens: seq.prefillTokens })
        seq.prefillTokens = null
      }
    }
    const token = this.take(seq, results, at)
    if (token === 'done') return this.finish(seq, 'eos_token')
    if (token === 'none') return this.fail(seq, new LoomError('generation_error', { detail: NO_TOKEN_ALLOWED }))
    seq.firstTokenAt ??= this.now()
    seq.channel.push({ type: 'tokens', tokens: [token] })
    const ending = this.stopReason(seq, token.id)
    if (ending !== null) this.finish(seq, ending)
  }

  /**
   * Take the token the runner sampled at position `at` (see `Sampled`) and commit it to the
   * sequence: its tokens, sampling state (penalty history, draws) and output constraint.
   */
  private take(seq: Sequence, results: StepResults, at: number): Sampled {
    const { constraint, request } = seq
    // A terminated grammar without an eos token has nothing more to say (the runner saw an empty mask).
    if (constraint?.isTerminated() === true && request.eosTokenIds.length === 0) return 'done'
    const token = results.token(at, request.topLogprobs)
    if (token === null) return 'none'
    if (constraint !== null && !constraint.isTerminated()) constraint.accept(token.id)
    seq.sampling.record(token.id)
    seq.sampling.draws += seq.sampling.drawsPerToken
    seq.tokens.push(token.id)
    seq.generated++
    return token
  }

  /** Why the sequence must stop after generating `id`, or null to go on. */
  private stopReason(seq: Sequence, id: number): BackendFinishReason | null {
    if (seq.request.eosTokenIds.includes(id)) return 'eos_token'
    if (seq.generated >= seq.request.maxNewTokens || seq.tokens.length >= this.requireLoaded().contextLimit)
      return 'length'
    return null
  }

  // ——— endings ———

  private finish(seq: Sequence, reason: BackendFinishReason): void {
    if (!this.active.has(seq)) return
    this.recordDrafterSpeed(seq)
    const queueMs = (seq.firstScheduledAt ?? this.now()) - seq.submittedAt
    seq.channel.push({ type: 'finish', reason, queueMs })
    seq.channel.end()
    this.release(seq)
  }

  /** A finished request's decode speed (tokens after the first, from the first on) for its drafter choice. */
  private recordDrafterSpeed(seq: Sequence): void {
    if (this.drafterChoice === null || seq.choiceKey === null || seq.firstTokenAt === null) return
    if (seq.drafter !== 'medusa' && seq.drafter !== 'prompt-lookup') return
    this.drafterChoice.record(seq.choiceKey, seq.drafter, seq.generated - 1, this.now() - seq.firstTokenAt)
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
    seq.constraint?.dispose()
    seq.constraint = null
    const adapters = this.loaded?.adapters
    if (adapters !== undefined) {
      if (seq.request.adapter !== null) adapters.release(seq.request.adapter)
      if (seq.request.speculator !== null) adapters.release(seq.request.speculator)
    }
    this.workDone()
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

/** A row that decodes (one new token, or a Medusa candidate tree) rather than prefilling a prompt. */
function isDecodeRow({ row, treeNodes, chunk, prefillLogits }: PlannedRow): boolean {
  return treeNodes > 0 || (chunk === 1 && !prefillLogits && row.cacheLen > 0)
}

/** Concurrency buckets for the drafter choice: alone, a few, a batch, a big batch. */
function loadBucket(sequences: number): string {
  return sequences <= 1 ? 'alone' : sequences <= 4 ? 'few' : sequences <= 16 ? 'batch' : 'big'
}
