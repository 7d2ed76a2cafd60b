/**
 * The request-level `Backend` on TensorRT-LLM's executor (through the addon of `native-api.ts`).
 * The executor batches, schedules, caches LoRA weights and runs Medusa by itself; this class maps
 * requests in and responses out, and owns the lifecycle:
 *
 * - `submit` checks what the executor cannot do, queues the request (streaming) and returns its
 *   events. Responses arrive in batches on the JS thread and are routed by request id.
 * - LoRA: a request names its adapter's task id alone while the task is believed cached, and
 *   carries the weights otherwise (see `LoraRegistry`). The cache-miss error re-sends it once with
 *   the weights; "cache full" (every cached task in use by running requests) waits for a request to
 *   end and re-sends, up to `lora_cache.wait_s`. The client sees neither.
 * - Cancellation: aborting the request's signal ends its stream with `cancelled` at once and asks
 *   the executor to cancel; the request counts as running until the executor's final response, so
 *   `close()` waits for it. A consumer that leaves the stream cancels the same way, silently.
 * - Lifecycle (the core's `BackendLifecycle`, shared with the `BatchingEngine`): `close()` refuses new
 *   work and resolves once every accepted request has ended and the executor has shut down;
 *   `destroy(err)` fails every request now and shuts the executor down. Both are idempotent.
 */
import {
  BackendLifecycle,
  EventChannel,
  IDLE_BACKEND_STATS,
  LoomError,
  readLoraAdapter,
  readMedusaAdapter,
  type AdapterHandle,
  type Backend,
  type BackendCapabilities,
  type BackendFinishReason,
  type BackendRequest,
  type BackendStats,
  type GenerationEvent,
  type LocalAdapter,
  type Logger,
  type ModelSpec,
} from '@loom/core'
import { readEngineConfig, type EngineFacts } from './engine-config.ts'
import { readGuidedVocab } from './guided-vocab.ts'
import { LORA_NOT_CACHED, LoraRegistry, type LoraEntry } from './lora-registry.ts'
import type { NativeExecutor, NativeResponse, TrtllmAddon } from './native-api.ts'
import { checkSupported, guidedJsonSchema, toFinishReason, toNativeRequest } from './request-mapping.ts'
import { executorOptions, parallelMode, worldSize, type TrtllmOptions } from './trtllm-options.ts'
import { resolveWorkerPath } from './worker-path.ts'

/** What a `TrtllmBackend` is built from. */
export interface TrtllmBackendInit {
  readonly addon: TrtllmAddon
  /** Absolute path of the engine directory. */
  readonly engineDir: string
  /** The model directory the core serves (its tokenizer feeds guided decoding). */
  readonly modelDir: string
  readonly options: TrtllmOptions
  readonly logger: Logger
  /** Clock in milliseconds (tests inject one). */
  readonly now?: () => number
}

/** Everything that exists only after `start()`. */
interface Started {
  readonly executor: NativeExecutor
  readonly engine: EngineFacts
  readonly capabilities: BackendCapabilities
  readonly spec: ModelSpec
  readonly loras: LoraRegistry
}

/** One accepted request, from `submit` until the executor's final response for it. */
interface Run {
  readonly request: BackendRequest
  readonly channel: EventChannel<GenerationEvent>
  readonly clientId: number
  readonly lora: LoraEntry | null
  readonly guidedJsonSchema: string | undefined
  readonly submittedAt: number
  /** The executor's id of the current attempt; null while waiting for LoRA cache room. */
  nativeId: number | null
  firstResponseAt: number | null
  /** Tokens handed to the consumer; a request that streamed any is never re-sent. */
  emitted: number
  /** Re-sent with weights after a cache miss (only once). */
  resent: boolean
  /** When it first found the LoRA cache full (null: never). */
  waitingSince: number | null
  /** Why it is being cancelled: its signal aborted, or its consumer left. */
  cancelling: 'signal' | 'consumer' | null
  detachSignal: (() => void) | null
}

/** How often requests waiting for LoRA cache room retry when no other request ends meanwhile. */
const CACHE_FULL_RETRY_MS = 50

export class TrtllmBackend extends BackendLifecycle implements Backend {
  readonly #addon: TrtllmAddon
  readonly #engineDir: string
  readonly #modelDir: string
  readonly #options: TrtllmOptions
  readonly #logger: Logger
  readonly #now: () => number
  readonly #active = new Set<Run>()
  readonly #byNativeId = new Map<number, Run>()
  readonly #waitingForRoom = new Set<Run>()
  /** Adapters being read, by key: concurrent loads of one key share one read. */
  readonly #loading = new Map<string, Promise<AdapterHandle>>()
  #started: Started | null = null
  #startPromise: Promise<void> | null = null
  /** Set when the shutdown starts: stats then read zero. */
  #shutdownStarted = false
  #retryTimer: NodeJS.Timeout | null = null
  #nextClientId = 1

  constructor(init: TrtllmBackendInit) {
    super()
    this.#addon = init.addon
    this.#engineDir = init.engineDir
    this.#modelDir = init.modelDir
    this.#options = init.options
    this.#logger = init.logger
    this.#now = init.now ?? (() => performance.now())
  }

  start(): Promise<void> {
    if (this.#startPromise === null) {
      if (this.closing) return Promise.reject(new LoomError('server_closing'))
      this.#startPromise = this.#start()
    }
    return this.#startPromise
  }

  async #start(): Promise<void> {
    const engine = await readEngineConfig(this.#engineDir)
    const native = this.#addon.capabilities
    const options = this.#options
    const refuse = (detail: string): LoomError => new LoomError('model_invalid', { path: this.#engineDir, detail })
    if (engine.tensorParallel !== options.tensor_parallel || engine.pipelineParallel !== options.pipeline_parallel) {
      throw refuse(
        `the engine was built for tensor_parallel ${engine.tensorParallel} × pipeline_parallel ${engine.pipelineParallel}; the options say ${options.tensor_parallel} × ${options.pipeline_parallel}`,
      )
    }
    if (engine.medusaHeads > 0 && !native.medusa) {
      throw refuse(`the engine has ${engine.medusaHeads} Medusa heads, but this ${native.impl} build cannot run Medusa`)
    }
    if (options.guided_decoding && !native.guidedDecoding) {
      throw refuse(`guided_decoding is on, but this ${native.impl} build (${native.version}) has no guided decoding`)
    }
    // Before the engine loads: orchestrator mode spawns the workers from this path.
    const workerPath =
      parallelMode(options) === 'orchestrator'
        ? resolveWorkerPath(options.worker_path, worldSize(options), {
            ...(process.env.TRTLLM_ROOT ? { trtllmRoot: process.env.TRTLLM_ROOT } : {}),
            ...(native.libraryPath !== undefined ? { libraryPath: native.libraryPath } : {}),
          })
        : undefined
    const loraModules = engine.loraTargetModules.length
    const guided = options.guided_decoding ? await readGuidedVocab(this.#modelDir, engine.vocabSize) : undefined
    const executor = await this.#addon.create(
      executorOptions(
        options,
        {
          engineDir: this.#engineDir,
          moduleLayersPerAdapter: loraModules * engine.numLayers,
          medusa: engine.medusaHeads > 0,
          vocabSize: engine.vocabSize,
          ...(workerPath !== undefined ? { workerPath } : {}),
        },
        guided,
      ),
      (responses) => this.#onResponses(responses),
    )
    if (this.closing) {
      // Closed while the engine loaded: nothing can use it.
      await executor.shutdown()
      throw new LoomError('server_closing')
    }
    const lora = engine.maxLoraRank > 0 && loraModules > 0
    const moduleLayers = executor.stats().loraCacheModuleLayersTotal
    // Adapters of the engine's largest shape the executor's cache holds at once (at least one).
    const adapterSlots = !lora
      ? 0
      : (options.lora_cache.max_adapters ??
        Math.max(1, Math.floor(Math.max(0, moduleLayers) / (loraModules * engine.numLayers))))
    this.#started = {
      executor,
      engine,
      spec: modelSpec(engine),
      loras: new LoraRegistry(engine.dtype),
      capabilities: {
        name: native.impl === 'fake' ? 'trtllm-fake' : 'trtllm',
        device: native.impl === 'fake' ? 'fake' : 'cuda',
        dtype: engine.dtype,
        maxContextLength: engine.maxSeqLen,
        vocabSize: engine.vocabSize,
        maxLoraRank: lora ? engine.maxLoraRank : 0,
        adapterSlots,
        loraTargetModules: lora ? engine.loraTargetModules : [],
        medusa: engine.medusaHeads > 0,
        structuredOutput: options.guided_decoding,
        modelShape: {
          architecture: engine.architecture,
          vocab_size: engine.vocabSize,
          hidden_size: engine.hiddenSize,
          intermediate_size: engine.intermediateSize,
          num_hidden_layers: engine.numLayers,
          num_attention_heads: engine.numHeads,
          num_key_value_heads: engine.numKvHeads,
          head_dim: engine.headDim,
        },
      },
    }
    const parallel = executor.info()
    this.#logger.info(
      {
        impl: native.impl,
        version: native.version,
        dtype: engine.dtype,
        medusaHeads: engine.medusaHeads,
        parallelMode: parallel.parallelMode,
        ranks: parallel.worldSize,
        ...(parallel.workerPath !== undefined ? { workerPath: parallel.workerPath } : {}),
      },
      'TensorRT-LLM executor ready',
    )
  }

  capabilities(): BackendCapabilities {
    return this.#requireStarted().capabilities
  }

  loadAdapter(adapter: LocalAdapter): Promise<AdapterHandle> {
    if (this.closing) return Promise.reject(new LoomError('server_closing'))
    if (this.#started === null) return Promise.reject(new LoomError('backend_not_ready'))
    const { source, id, revision } = adapter.resolved
    const key = `${source}:${id}@${revision}`
    const known = this.#started.loras.get(key)?.handle
    if (known !== undefined) return Promise.resolve(known)
    let loading = this.#loading.get(key)
    if (loading === undefined) {
      loading = this.#load(this.#started, adapter, key).finally(() => this.#loading.delete(key))
      this.#loading.set(key, loading)
    }
    return loading
  }

  async #load(started: Started, adapter: LocalAdapter, key: string): Promise<AdapterHandle> {
    const { id } = adapter.resolved
    const { engine, spec } = started
    if (adapter.kind === 'medusa') {
      // The heads that run are the engine's own; a Medusa adapter only names them, so it must match.
      if (engine.medusaHeads === 0) {
        throw new LoomError('adapter_invalid', { id, detail: 'the TensorRT-LLM engine was built without Medusa heads' })
      }
      const heads = await readMedusaAdapter(adapter.dir, id, spec)
      if (heads.numHeads !== engine.medusaHeads) {
        throw new LoomError('adapter_invalid', {
          id,
          detail: `it has ${heads.numHeads} heads; the TensorRT-LLM engine was built with ${engine.medusaHeads}`,
        })
      }
      return { key, id, kind: 'medusa', size: heads.numHeads }
    }
    if (started.capabilities.maxLoraRank === 0) {
      throw new LoomError('adapter_invalid', {
        id,
        detail: 'the TensorRT-LLM engine was built without the LoRA plugin',
      })
    }
    const weights = await readLoraAdapter(adapter.dir, id, spec)
    weights.layers.forEach((modules, layer) => {
      for (const module of Object.keys(modules)) {
        if (!(engine.loraTargetModules as readonly string[]).includes(module)) {
          throw new LoomError('adapter_invalid', {
            id,
            detail: `layer ${layer} adapts ${module}, which the engine's LoRA plugin does not (built with ${engine.loraTargetModules.join(', ')})`,
          })
        }
      }
    })
    if (this.closing) throw new LoomError('server_closing')
    return started.loras.add(key, id, weights).handle
  }

  unloadAdapter(handle: AdapterHandle): Promise<void> {
    // Running requests keep their entry (and its tensors) until they end.
    this.#started?.loras.remove(handle.key)
    return Promise.resolve()
  }

  submit(request: BackendRequest): AsyncIterable<GenerationEvent> {
    if (this.closing) throw new LoomError('server_closing')
    const started = this.#requireStarted()
    checkSupported(request, started.capabilities.structuredOutput)
    const { maxContextLength, vocabSize } = started.capabilities
    const promptLength = request.inputIds.length
    if (promptLength === 0 || promptLength >= maxContextLength) {
      throw new LoomError('bad_request', {
        detail: `the prompt has ${promptLength} tokens; it must have 1 to ${maxContextLength - 1}`,
      })
    }
    for (const id of request.inputIds) {
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
        throw new LoomError('bad_request', { detail: `token id ${id} is outside the vocabulary` })
      }
    }
    const { adapter, speculator } = request
    let lora: LoraEntry | null = null
    if (adapter !== null) {
      if (adapter.kind !== 'lora') {
        throw new LoomError('bad_request', {
          detail: `adapter ${adapter.key} is a ${adapter.kind} adapter, not a LoRA`,
        })
      }
      lora = started.loras.get(adapter.key) ?? null
      if (lora === null) throw new LoomError('bad_request', { detail: `adapter ${adapter.key} is not loaded` })
    }
    // The engine's Medusa heads run for every request; a speculator only has to be Medusa heads.
    if (speculator !== null && speculator.kind !== 'medusa') {
      throw new LoomError('bad_request', {
        detail: `speculator ${speculator.key} is a ${speculator.kind} adapter, not Medusa`,
      })
    }
    let run: Run | null = null
    const channel = new EventChannel<GenerationEvent>(() => {
      if (run !== null) this.#cancel(run, 'consumer')
    })
    const current: Run = {
      request,
      channel,
      clientId: this.#nextClientId++,
      lora,
      guidedJsonSchema: request.grammar !== null ? guidedJsonSchema(request.grammar) : undefined,
      submittedAt: this.#now(),
      nativeId: null,
      firstResponseAt: null,
      emitted: 0,
      resent: false,
      waitingSince: null,
      cancelling: null,
      detachSignal: null,
    }
    // The first enqueue throws to the caller (`overloaded`, a refused argument): nothing to undo.
    this.#enqueue(started, current, false)
    run = current
    this.#active.add(current)
    if (request.signal.aborted) {
      this.#cancel(current, 'signal')
      return channel
    }
    const onAbort = (): void => this.#cancel(current, 'signal')
    request.signal.addEventListener('abort', onAbort, { once: true })
    current.detachSignal = () => request.signal.removeEventListener('abort', onAbort)
    return channel
  }

  stats(): BackendStats {
    const started = this.#started
    if (started === null || this.#shutdownStarted) return IDLE_BACKEND_STATS
    const s = started.executor.stats()
    // The executor reports -1 for what it does not know.
    const known = (value: number, fallback: number): number => (value >= 0 ? value : fallback)
    return {
      runningRequests: known(s.activeRequests, 0),
      queuedRequests: known(s.queuedRequests, 0) + this.#waitingForRoom.size,
      kvBlocksTotal: known(s.kvBlocksMax, 0),
      kvBlocksFree: known(s.kvBlocksFree, 0),
      loadedAdapters: known(s.loraTasksCached, started.loras.size),
      // The executor does not say which of its requests run and which wait in its queue: every
      // request it holds counts as running; waiting ones are those held back for LoRA cache room.
      runningAdapters: adapterIds([...this.#active].filter((run) => run.nativeId !== null)),
      waitingAdapters: adapterIds(this.#waitingForRoom),
    }
  }

  // ——— lifecycle (BackendLifecycle: close drains, destroy fails all) ———

  protected isIdle(): boolean {
    return this.#active.size === 0
  }

  protected failAll(reason: Error): void {
    for (const run of [...this.#active]) this.#fail(run, reason)
  }

  // ——— requests ———

  /** Queue (or re-queue) `run`; throws what the addon throws. */
  #enqueue(started: Started, run: Run, withWeights: boolean): void {
    const lora = run.lora === null ? undefined : started.loras.requestPart(run.lora, withWeights)
    const nativeId = started.executor.enqueue(
      toNativeRequest(run.request, {
        clientId: run.clientId,
        ...(lora !== undefined ? { lora } : {}),
        ...(run.guidedJsonSchema !== undefined ? { guidedJsonSchema: run.guidedJsonSchema } : {}),
      }),
    )
    // The executor now has the weights (it caches them as it takes the request).
    if (run.lora !== null && lora?.tensors !== undefined) run.lora.cached = true
    run.nativeId = nativeId
    this.#byNativeId.set(nativeId, run)
  }

  /** Route a batch of responses (on the JS thread, in the executor's order). Must not throw. */
  #onResponses(responses: readonly NativeResponse[]): void {
    let ended = false
    for (const response of responses) {
      const run = this.#byNativeId.get(response.requestId)
      if (run === undefined) continue
      try {
        if (response.final) {
          ended = true
          this.#byNativeId.delete(response.requestId)
          run.nativeId = null
        }
        this.#onResponse(run, response)
      } catch (err) {
        this.#logger.error({ err, requestId: run.request.id }, 'handling a TensorRT-LLM response failed')
        this.#fail(run, generationError(err instanceof Error ? err.message : String(err)))
      }
    }
    // A request that ended may have freed LoRA cache room.
    if (ended && this.#waitingForRoom.size > 0) this.#retryWaiting()
  }

  #onResponse(run: Run, response: NativeResponse): void {
    run.firstResponseAt ??= this.#now()
    if (response.finishReason === 'error' || response.errorKind !== undefined) {
      this.#onError(run, response)
      return
    }
    if (response.tokens.length > 0 && run.cancelling === null) {
      const { tokens, logProbs } = response
      // Several tokens in one streamed response are Medusa's accepted candidates: the first is the
      // step's token, the others were accepted with it.
      run.channel.push({
        type: 'tokens',
        tokens: Array.from(tokens, (id, i) => ({ id, logprob: logProbs?.[i] ?? Number.NaN, skipped: i > 0 })),
      })
      run.emitted += tokens.length
    }
    if (!response.final) return
    const reason = toFinishReason(response.finishReason)
    if (run.cancelling !== null) this.#finish(run, 'cancelled')
    else if (reason === null)
      this.#fail(run, generationError(`the executor ended the request (${response.finishReason})`))
    else this.#finish(run, reason)
  }

  #onError(run: Run, response: NativeResponse): void {
    const text = response.error ?? 'unknown error'
    if (run.cancelling !== null) return this.#finish(run, 'cancelled')
    const started = this.#started
    const fresh = run.lora !== null && run.emitted === 0 && started !== null && !this.destroyed
    const notCached = response.errorKind === 'lora_not_cached' || LORA_NOT_CACHED.test(text)
    if (notCached && fresh && !run.resent) {
      // Evicted since it was last sent (or never arrived): send the weights, once.
      run.lora!.cached = false
      run.resent = true
      this.#logger.debug({ requestId: run.request.id, taskId: run.lora!.taskId }, 'LoRA cache miss; re-sending weights')
      return this.#requeue(started, run)
    }
    if (response.errorKind === 'lora_cache_full' && fresh) {
      run.waitingSince ??= this.#now()
      const waitMs = this.#options.lora_cache.wait_s * 1000
      if (this.#now() - run.waitingSince <= waitMs) {
        this.#waitingForRoom.add(run)
        this.#armRetryTimer()
        return
      }
      return this.#fail(run, new LoomError('adapter_slots_full', { slots: started.executor.stats().loraTasksCached }))
    }
    if (response.errorKind === 'shut_down') return this.#fail(run, new LoomError('server_closing'))
    this.#fail(run, generationError(text))
  }

  /** Send `run` again with its LoRA weights; a refusal fails it. */
  #requeue(started: Started, run: Run): void {
    try {
      this.#enqueue(started, run, true)
    } catch (err) {
      this.#fail(run, err instanceof LoomError ? err : generationError(String(err)))
    }
  }

  /** Re-send every request waiting for LoRA cache room (a full cache answers them again if need be). */
  #retryWaiting(): void {
    const started = this.#started
    if (started === null) return
    const waiting = [...this.#waitingForRoom]
    this.#waitingForRoom.clear()
    for (const run of waiting) this.#requeue(started, run)
  }

  #armRetryTimer(): void {
    if (this.#retryTimer !== null) return
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null
      if (this.#waitingForRoom.size > 0) this.#retryWaiting()
    }, CACHE_FULL_RETRY_MS)
  }

  /**
   * Cancel `run`: its signal aborted (the stream ends with `cancelled` now) or its consumer left.
   * The executor's final response releases it.
   */
  #cancel(run: Run, why: 'signal' | 'consumer'): void {
    if (!this.#active.has(run) || run.cancelling !== null) return
    run.cancelling = why
    if (why === 'signal') this.#report(run, 'cancelled')
    if (run.nativeId === null) {
      // Waiting for LoRA cache room: nothing is queued.
      this.#release(run)
      return
    }
    try {
      this.#started?.executor.cancel(run.nativeId)
    } catch (err) {
      // After shutdown the executor refuses: its final responses are on their way anyway.
      this.#logger.debug({ err, requestId: run.request.id }, 'cancel refused')
    }
  }

  // ——— endings ———

  /**
   * Push the finish event (no-op once the stream is closed). The executor does not say when a
   * request left its queue: the time to its first response (queue and prefill) stands for it.
   */
  #report(run: Run, reason: BackendFinishReason): void {
    const queueMs = (run.firstResponseAt ?? this.#now()) - run.submittedAt
    run.channel.push({ type: 'finish', reason, queueMs })
    run.channel.end()
  }

  #finish(run: Run, reason: BackendFinishReason): void {
    this.#report(run, reason)
    this.#release(run)
  }

  #fail(run: Run, err: unknown): void {
    run.channel.fail(err)
    this.#release(run)
  }

  #release(run: Run): void {
    if (!this.#active.delete(run)) return
    this.#waitingForRoom.delete(run)
    if (run.nativeId !== null) {
      // Failed while the executor still runs it (destroy): its final response is not waited for.
      this.#byNativeId.delete(run.nativeId)
      try {
        this.#started?.executor.cancel(run.nativeId)
      } catch {
        // Shut down already.
      }
      run.nativeId = null
    }
    run.detachSignal?.()
    run.detachSignal = null
    this.workDone()
  }

  protected async shutdown(): Promise<void> {
    this.#shutdownStarted = true
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer)
    this.#retryTimer = null
    // A start in flight finishes first (it shuts down the executor it made, seeing `closing`).
    await (this.#startPromise ?? Promise.resolve()).catch(() => undefined)
    await Promise.resolve(this.#started?.executor.shutdown()).catch((err: unknown) =>
      this.#logger.error({ err }, 'TensorRT-LLM shutdown failed'),
    )
  }

  #requireStarted(): Started {
    if (this.destroyed) throw new LoomError('server_closing')
    if (this.#started === null) throw new LoomError('backend_not_ready')
    return this.#started
  }
}

/** Distinct LoRA adapter ids of `runs`, first seen first. */
function adapterIds(runs: Iterable<Run>): string[] {
  const ids = new Set<string>()
  for (const run of runs) if (run.lora !== null) ids.add(run.lora.handle.id)
  return [...ids]
}

function generationError(detail: string): LoomError {
  return new LoomError('generation_error', { detail })
}

/** The model facts the core's adapter readers check adapters against. */
function modelSpec(engine: EngineFacts): ModelSpec {
  return {
    architecture: engine.architecture,
    dtype: engine.dtype,
    device: 'cuda',
    vocabSize: engine.vocabSize,
    hiddenSize: engine.hiddenSize,
    intermediateSize: engine.intermediateSize,
    numLayers: engine.numLayers,
    numHeads: engine.numHeads,
    numKvHeads: engine.numKvHeads,
    headDim: engine.headDim,
    maxContextLength: engine.maxSeqLen,
    // The executor owns the KV cache and adapter memory; the readers do not look at these.
    kvBlockSize: 0,
    kvBlockCount: 0,
    adapterSlots: 0,
    maxLoraRank: engine.maxLoraRank,
  }
}
