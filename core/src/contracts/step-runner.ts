/**
 * Step-level backend: one forward pass over a mixed batch. The core's `BatchingEngine` owns
 * scheduling, the KV block allocator, sampling, stop rules, grammar masks and Medusa verification,
 * and drives any `StepRunner` through this contract. The native backend implements it with a
 * `cpu` device today and a `cuda` device next.
 *
 * KV cache model: the runner owns `kvBlockCount` blocks of `kvBlockSize` token slots per layer.
 * A sequence's cache index `c` lives in slot `blockTable[c / kvBlockSize] * kvBlockSize + c % kvBlockSize`.
 * The engine allocates and frees blocks; the runner only reads and writes the slots it is told to.
 */

/** Projections a LoRA adapter may target, in the order the runtime stores them. */
export const LORA_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const
export type LoraModule = (typeof LORA_MODULES)[number]

/** Facts about the loaded model the engine needs to schedule and validate. */
export interface ModelSpec {
  /** `LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM`. */
  readonly architecture: string
  /** Weight dtype as stored on the device: `float32`, `float16`, `bfloat16`. */
  readonly dtype: string
  /** `cpu` or `cuda`. */
  readonly device: string
  readonly vocabSize: number
  readonly hiddenSize: number
  readonly intermediateSize: number
  readonly numLayers: number
  readonly numHeads: number
  readonly numKvHeads: number
  readonly headDim: number
  /** Longest sequence the model supports (`max_position_embeddings`, possibly capped by config). */
  readonly maxContextLength: number
  /** Token slots per KV block. */
  readonly kvBlockSize: number
  /** Blocks available to the engine. */
  readonly kvBlockCount: number
  /** How many adapters (LoRA and Medusa together) can be resident at once. */
  readonly adapterSlots: number
  /** Largest LoRA rank a slot accepts. */
  readonly maxLoraRank: number
  /** The runner honours `StepRow.medusaLeaf` (and returns `StepOutput.medusaLeaves`). */
  readonly medusaLeaf?: boolean
}

/** Low-rank update of one projection: `y += scale · B (A x)`. */
export interface LoraModuleWeights {
  readonly rank: number
  /** `lora_alpha / r`, or `lora_alpha / sqrt(r)` for rsLoRA — already resolved by the core. */
  readonly scale: number
  /** `[rank, inFeatures]`, row-major, f32. */
  readonly a: Float32Array
  /** `[outFeatures, rank]`, row-major, f32. */
  readonly b: Float32Array
}

/** A parsed LoRA adapter: `layers[l][module]` is absent where the adapter does not touch it. */
export interface LoraWeights {
  readonly kind: 'lora'
  /** The adapter's content key (`AdapterHandle.key`), for logs. */
  readonly key: string
  readonly layers: readonly Readonly<Partial<Record<LoraModule, LoraModuleWeights>>>[]
}

/**
 * Medusa heads. Head `h` maps the last hidden state `x` to logits:
 * `x_h = x; repeat numLayers: x_h = x_h + SiLU(W x_h + b)`, then `lm_head(x_h)` — its own
 * (`lmHead`, version 1) or the base model's (version 2, `lmHead` absent).
 */
export interface MedusaWeights {
  readonly kind: 'medusa'
  readonly key: string
  readonly numHeads: number
  readonly numLayers: number
  readonly heads: readonly {
    /** `numLayers` residual blocks: `weight` `[hidden, hidden]`, `bias` `[hidden]`. */
    readonly blocks: readonly { readonly weight: Float32Array; readonly bias: Float32Array }[]
    /** `[vocab, hidden]`; absent for version 2 (reuse the base LM head). */
    readonly lmHead?: Float32Array
  }[]
}

/** One sequence's share of a step. All typed arrays are owned by the engine and read-only to the runner. */
export interface StepRow {
  /** The engine's id for the sequence (stable across steps), for logs and runner-side caches. */
  readonly seqId: number
  /** `[n]` token ids fed this step: a prefill chunk, one decode token, or 1 + Medusa candidates. */
  readonly tokens: Int32Array
  /** `[n]` RoPE positions. Linear for prefill/decode; tree depth + offset for candidates. */
  readonly positions: Int32Array
  /** Committed cache entries before this step; token `i` is written at cache index `cacheLen + i`. */
  readonly cacheLen: number
  /** Block ids covering cache indices `[0, cacheLen + n)`. */
  readonly blockTable: Int32Array
  /**
   * `[n, n]` row-major 0/1: token `i` attends to new token `j` iff `treeMask[i*n + j]` (it always
   * attends to all `cacheLen` committed entries). Absent: causal (`j <= i`).
   */
  readonly treeMask?: Uint8Array
  /** Adapter slot for every token of this row, or -1 for the base model. */
  readonly loraSlot: number
  /** Indices into `tokens` whose next-token logits are returned, ascending. */
  readonly logitIndices: Int32Array
  /** Medusa slot whose heads run on the hidden states at `medusaIndices`, or -1. */
  readonly medusaSlot: number
  /** Indices into `tokens` whose Medusa head logits are returned (empty unless `medusaSlot >= 0`). */
  readonly medusaIndices: Int32Array
  /**
   * Greedy leaf (only where `ModelSpec.medusaLeaf`): instead of `medusaIndices` (which must be
   * empty), run the heads at one node, where a greedy walk of the row's tree stops: from token 0,
   * move to the child (nearest-ancestor relation of `treeMask`; a causal row is a chain) whose
   * token is the node's logits argmax, until none is. `logitIndices` must be every token. The
   * row's head block is `[1, numHeads, vocabSize]` and `StepOutput.medusaLeaves` names the node.
   * For a verification row of plain greedy decoding, that node is where the engine's own walk
   * stops, so the heads run once instead of at every node where the walk might stop.
   */
  readonly medusaLeaf?: boolean
}

/**
 * Cache moves applied **before** the forward pass: entry `from[i]` of the sequence is copied to
 * entry `to[i]` in every layer. Medusa uses it to compact the accepted branch of a verified tree.
 */
export interface KvCopy {
  readonly blockTable: Int32Array
  readonly from: Int32Array
  readonly to: Int32Array
}

export interface StepBatch {
  readonly rows: readonly StepRow[]
  readonly kvCopies: readonly KvCopy[]
  /**
   * Optional: how many best ids per Medusa head row the engine's drafts take; a runner may then
   * return them in `StepOutput.medusaTopIds` so the engine need not scan the rows.
   */
  readonly medusaTopK?: number
}

/**
 * What a step returns. A runner may reuse these arrays for its next step (the native runner does:
 * on a small model, allocating them every step costs as much as the step), so read them before
 * calling `step` again.
 */
export interface StepOutput {
  /** `[Σ rows' logitIndices.length, vocabSize]`, rows in batch order. */
  readonly logits: Float32Array
  /** `[Σ rows' medusaIndices.length, numHeads, vocabSize]`, rows in batch order; empty when unused. */
  readonly medusaLogits: Float32Array
  /**
   * Optional `[Σ rows' logitIndices.length]`: each logits row's `log Σ exp` (its log-softmax
   * normaliser), for a runner that computes it cheaply where the logits are; the engine computes
   * it itself when absent.
   */
  readonly logNormalizers?: Float64Array
  /**
   * Optional `[Σ rows' logitIndices.length]`: each logits row's first maximum (NaN never chosen;
   * -1 when no value is above -Infinity), which greedy decoding takes as is.
   */
  readonly argmax?: Int32Array
  /** With `StepRow.medusaLeaf` rows: per row (batch order), the node its heads ran at; -1 for other rows. */
  readonly medusaLeaves?: Int32Array
  /**
   * Optional, when the batch asked `medusaTopK`: `[Σ head rows, medusaTopK]`, each head row's best
   * ids, best first, ties to the lower id (NaN never; -1 past a row's non-NaN values).
   */
  readonly medusaTopIds?: Int32Array
}

/**
 * One forward step at a time. Calls to `step` never overlap (the engine awaits each); adapter
 * loads may run between steps. Heavy work must run off the JS thread.
 */
export interface StepRunner {
  /** Load weights, allocate the KV cache, and report the model's facts. Called once. */
  load(): Promise<ModelSpec>
  /** Copy adapter weights into a free slot and return its number. Throws `adapter_slots_full` when none is free. */
  loadAdapter(weights: LoraWeights | MedusaWeights): Promise<number>
  /** Free a slot. The engine guarantees no queued or running row references it. */
  unloadAdapter(slot: number): Promise<void>
  /** Run one forward pass over `batch`. */
  step(batch: StepBatch): Promise<StepOutput>
  /** Release native memory and threads. Idempotent. */
  close(): Promise<void>
}

/** Injection token for the `StepRunner` a step-level backend plugin provides. */
export const StepRunner: unique symbol = Symbol('StepRunner')
