/**
 * `StepRunner` over the native C++ runtime (`cpu` device). Converts contract types into the
 * addon's typed-array layout, tracks which adapter slots are free, and turns native failures
 * (errors carrying a Loom code) into `LoomError`s.
 */
import {
  LORA_MODULES,
  LoomError,
  isLoomError,
  type ErrorCode,
  type LoraWeights,
  type MedusaWeights,
  type ModelSpec,
  type StepBatch,
  type StepOutput,
  type StepRunner,
} from '@loom/core'
import {
  loadNative,
  type NativeLoraModule,
  type NativePackedStep,
  type NativeRuntime,
  type NativeStepProfile,
} from './load-native.ts'
import { readModelConfig, type ParsedModelConfig } from './model-config.ts'
import { defaultThreads, nativeOptionsSchema, type NativeOptions, type NativeOptionsInput } from './runner-options.ts'
import { InlineStepPolicy } from './inline-steps.ts'
import { indexSafetensors } from './safetensors-index.ts'
import { packStep, StepBuffers } from './step-packer.ts'

/** Convert an error from the addon (an Error with a registry `code`) into a LoomError. */
function fromNative(err: unknown, params: Record<string, string>): LoomError {
  if (isLoomError(err)) return err
  const e = err as Error & { code?: string }
  const detail = e?.message ?? String(err)
  switch (e?.code) {
    case 'model_invalid':
      return new LoomError('model_invalid', { path: params.path ?? '', detail }, { cause: err })
    case 'adapter_invalid':
    case 'adapter_load_failed':
      return new LoomError(e.code as ErrorCode, { id: params.id ?? '', detail }, { cause: err })
    case 'backend_not_ready':
      return new LoomError('backend_not_ready', {}, { cause: err })
    case 'cuda_unavailable':
      return new LoomError('cuda_unavailable', { detail }, { cause: err })
    default:
      return new LoomError('native_error', { detail }, { cause: err })
  }
}

export class NativeStepRunner implements StepRunner {
  readonly modelPath: string
  readonly options: NativeOptions
  private runtime: NativeRuntime | null = null
  private spec: ModelSpec | null = null
  private config: ParsedModelConfig | null = null
  /** Per slot: null when free, else what it holds. */
  private readonly slots: ({ kind: 'lora' } | { kind: 'medusa' } | { kind: 'loading' } | null)[] = []
  private inflight: Promise<unknown> = Promise.resolve()
  private closed = false
  /** Every step's input and output arrays, reused (see `StepOutput`: valid until the next step). */
  private readonly buffers = new StepBuffers()
  /** Which steps are short enough to run on the JS thread (`inline_step_max_us`). */
  private readonly inlineSteps: InlineStepPolicy
  private inlineStepCount = 0

  /**
   * @param modelPath a Hugging Face model folder (`config.json` + safetensors).
   * @param options the plugin's options (snake_case); absent keys take their defaults.
   */
  constructor(
    modelPath: string,
    options: NativeOptionsInput = {},
    private readonly hooks: { onLoaded?: (spec: ModelSpec) => void } = {},
  ) {
    this.modelPath = modelPath
    this.options = nativeOptionsSchema.parse(options)
    this.inlineSteps = new InlineStepPolicy(this.options.inline_step_max_us)
  }

  async load(): Promise<ModelSpec> {
    if (this.spec) return this.spec
    if (this.closed) throw new LoomError('server_closing')
    const addon = loadNative()
    const config = readModelConfig(this.modelPath)
    const index = indexSafetensors(this.modelPath)
    const o = this.options
    // A token count is exact; a budget in MiB becomes blocks natively, where the device's KV
    // element size is known (f32 on the cpu, f16 on cuda: twice the tokens for the same bytes).
    const kvBlocksAsked =
      o.kv_cache_tokens === undefined ? 0 : Math.max(1, Math.ceil(o.kv_cache_tokens / o.kv_block_size))
    const runtime = new addon.Runtime()
    try {
      const loaded = await runtime.load({
        device: o.device,
        config,
        options: {
          threads: o.threads ?? defaultThreads(),
          kvBlocks: kvBlocksAsked,
          kvCacheBytes: o.kv_cache_tokens === undefined ? o.kv_cache_mb * 1024 * 1024 : 0,
          kvBlockSize: o.kv_block_size,
          maxBatchTokens: o.max_batch_tokens,
          adapterSlots: o.adapter_slots,
          maxLoraRank: o.max_lora_rank,
          weights: o.weights,
        },
        files: index.files,
        tensors: index.tensors,
      })
      this.runtime = runtime
      this.config = config
      const kvBlocks = loaded.kvBlocks
      this.slots.length = o.adapter_slots
      this.slots.fill(null)
      this.spec = {
        architecture: config.architecture,
        dtype: loaded.dtype,
        device: loaded.device,
        vocabSize: config.vocabSize,
        hiddenSize: config.hiddenSize,
        intermediateSize: config.intermediateSize,
        numLayers: config.numLayers,
        numHeads: config.numHeads,
        numKvHeads: config.numKvHeads,
        headDim: config.headDim,
        maxContextLength: Math.min(config.maxPositions, kvBlocks * o.kv_block_size, o.max_context_length ?? Infinity),
        kvBlockSize: o.kv_block_size,
        kvBlockCount: kvBlocks,
        adapterSlots: o.adapter_slots,
        maxLoraRank: o.max_lora_rank,
      }
      this.hooks.onLoaded?.(this.spec)
      return this.spec
    } catch (err) {
      runtime.close()
      throw fromNative(err, { path: this.modelPath })
    }
  }

  async loadAdapter(weights: LoraWeights | MedusaWeights): Promise<number> {
    const runtime = this.ready()
    const slot = this.slots.indexOf(null)
    if (slot < 0) throw new LoomError('adapter_slots_full', { slots: this.slots.length })
    this.slots[slot] = { kind: 'loading' }
    try {
      if (weights.kind === 'lora') {
        await runtime.loadLora(slot, this.loraModules(weights))
        this.slots[slot] = { kind: 'lora' }
      } else {
        const heads = weights.heads.map((h) => ({
          weights: h.blocks.map((b) => b.weight),
          biases: h.blocks.map((b) => b.bias),
          ...(h.lmHead ? { lmHead: h.lmHead } : {}),
        }))
        await runtime.loadMedusa(slot, weights.numLayers, heads, weights.draftVocabulary)
        this.slots[slot] = { kind: 'medusa' }
      }
      return slot
    } catch (err) {
      this.slots[slot] = null
      throw fromNative(err, { id: weights.key })
    }
  }

  private loraModules(weights: LoraWeights): NativeLoraModule[] {
    const config = this.config!
    if (weights.layers.length > config.numLayers)
      throw new LoomError('adapter_invalid', {
        id: weights.key,
        detail: `adapter has ${weights.layers.length} layers; the model has ${config.numLayers}`,
      })
    const modules: NativeLoraModule[] = []
    weights.layers.forEach((layer, l) => {
      LORA_MODULES.forEach((name, m) => {
        const w = layer[name]
        if (w) modules.push({ layer: l, module: m, rank: w.rank, scale: w.scale, a: w.a, b: w.b })
      })
    })
    return modules
  }

  async unloadAdapter(slot: number): Promise<void> {
    const runtime = this.ready()
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.slots.length || this.slots[slot] === null) return
    runtime.unload(slot)
    this.slots[slot] = null
  }

  async step(batch: StepBatch): Promise<StepOutput> {
    const runtime = this.ready()
    const vocab = this.spec!.vocabSize
    for (const [r, row] of batch.rows.entries()) {
      if (row.positions.length !== row.tokens.length)
        throw new LoomError('native_error', {
          detail: `rows[${r}]: positions has ${row.positions.length} entries for ${row.tokens.length} tokens`,
        })
    }
    const packed = packStep(batch, vocab, this.buffers)
    await this.run(runtime, packed)
    return {
      tokens: packed.sampledTokens,
      logprobs: packed.sampledLogprobs,
      topIds: packed.topIds,
      topLogprobs: packed.topLogprobs,
      scores: packed.scores,
      walkEnds: packed.walkEnds,
      draftIds: packed.draftIds,
    }
  }

  /** Run a packed step on the JS thread when it is predicted to be short (`inline_step_max_us`), else on a worker. */
  private async run(runtime: NativeRuntime, packed: NativePackedStep): Promise<void> {
    const tokens = packed.tokens.length
    const started = performance.now()
    try {
      if (this.inlineSteps.inline(tokens)) {
        runtime.stepNow(packed)
        this.inlineStepCount++
      } else {
        const run = runtime.step(packed)
        this.inflight = run.catch(() => undefined)
        await run
      }
    } catch (err) {
      throw fromNative(err, {})
    }
    this.inlineSteps.record(tokens, (performance.now() - started) * 1000)
  }

  /**
   * Native timing since the last call (steps, their wall time, the part in LoRA kernels) and how
   * many of those steps ran on the JS thread (`inline_step_max_us`), then reset. For the
   * benchmark and tests; not part of the `StepRunner` contract.
   */
  profile(): NativeStepProfile & { readonly inlineSteps: number } {
    const inlineSteps = this.inlineStepCount
    this.inlineStepCount = 0
    return { ...this.ready().profile(), inlineSteps }
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await this.inflight
    this.runtime?.close()
    this.runtime = null
  }

  private ready(): NativeRuntime {
    if (this.closed) throw new LoomError('server_closing')
    if (!this.runtime) throw new LoomError('backend_not_ready')
    return this.runtime
  }
}
