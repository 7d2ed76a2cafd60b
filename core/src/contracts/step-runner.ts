import { GREEDY_SAMPLING, type SamplingParams } from './sampling.ts'

/**
 * Step-level backend: one forward pass over a mixed batch, sampled where its logits are. The
 * core's `BatchingEngine` owns scheduling, the KV block allocator, sampling state, stop rules,
 * grammar state and Medusa verification, and drives any `StepRunner` through this contract; the
 * runner turns each row's logits into tokens by the rules of `RowSampling` (the engine's
 * `TokenSampler` is the reference) and returns ids, never logits. The native backend implements
 * it with `cpu` and `cuda` devices; `sampleOnHost` (core/src/engine/sampler/host-step-sampler.ts)
 * does it for a runner that has logits in JS.
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
  /**
   * Ascending token ids the heads draft from, absent for the whole vocabulary: FR-Spec's reduced
   * LM head (frequent tokens only). A runner that honours it computes each head's logits over
   * these ids alone, so its `draftIds` are ids from this list; one that does not drafts from the
   * whole vocabulary. Either way outputs are the same: drafts are only proposals, and verification
   * uses the full LM head.
   */
  readonly draftVocabulary?: Int32Array
}

/**
 * How a row's sampled positions choose their tokens: the engine's `TokenSampler` semantics
 * (core/src/engine/sampler/token-sampler.ts is the reference every runner is held to, bit for
 * bit), from a request's parameters and its sampling state as plain data.
 *
 * On a verification row (one with `treeMask`) every node is sampled as if the walk had reached it:
 * node `i` at depth `d` draws from the stream after `draws + d` draws when the row samples
 * (temperature > 0 and top-k ≠ 1; greedy rows draw nothing), and its penalty history is
 * `penalties` plus one output occurrence of the token of each node on the path from the root's
 * child down to `i` itself (the tokens the walk would have emitted before reaching `i`).
 */
export interface RowSampling {
  readonly params: SamplingParams
  /** `nextFloat` draws the request's random stream made before this step. */
  readonly draws: number
  /**
   * `[2·k]` distinct `(id, output count)` pairs: every token the penalties look at (the prompt's
   * and output's tokens for the repetition penalty; output tokens with their counts for the
   * frequency and presence penalties; count 0 for a prompt-only token). Empty when no penalty is on.
   */
  readonly penalties: Int32Array
  /**
   * Grammar masks, `[positions, ceil(vocabSize / 32)]`: one per sampled position (a verification
   * row: one per node, each for the constraint state at that node; a node the grammar can never
   * reach may hold anything). Bit `v` of a position's mask set: token `v` may follow. Null: no constraint.
   */
  readonly allowed: Uint32Array | null
  /**
   * `[positions]` with `allowed`: 1 where the constraint has terminated, so only its allowed (eos)
   * tokens may follow, and an allowed token the model scored -Infinity becomes 0 (still choosable).
   */
  readonly terminated: Uint8Array | null
  /** Raw top logprobs to report with each sampled token, 0..`StepBatch.topLogprobs`. */
  readonly topLogprobs: number
}

/** Plain greedy decoding with no history, grammar or top logprobs (benches, tests, runner checks). */
export const GREEDY_ROW_SAMPLING: RowSampling = {
  params: GREEDY_SAMPLING,
  draws: 0,
  penalties: new Int32Array(0),
  allowed: null,
  terminated: null,
  topLogprobs: 0,
}

/** One sequence's share of a step. All typed arrays are owned by the engine and read-only to the runner. */
export interface StepRow {
  /** The engine's id for the sequence (stable across steps), for logs and runner-side caches. */
  readonly seqId: number
  /** `[n]` token ids fed this step: a prefill chunk, one decode token, or 1 + draft candidates. */
  readonly tokens: Int32Array
  /** `[n]` RoPE positions. Linear for prefill/decode; tree depth + offset for candidates. */
  readonly positions: Int32Array
  /** Committed cache entries before this step; token `i` is written at cache index `cacheLen + i`. */
  readonly cacheLen: number
  /** Block ids covering cache indices `[0, cacheLen + n)`. */
  readonly blockTable: Int32Array
  /**
   * A verification row: `[n, n]` row-major 0/1, token `i` attends to new token `j` iff
   * `treeMask[i*n + j]` (it always attends to all `cacheLen` committed entries); node 0 is the
   * root and a node's parent is its nearest ancestor (the largest `j < i` it attends to). Absent:
   * a causal row (`j <= i`).
   */
  readonly treeMask?: Uint8Array
  /** Adapter slot for every token of this row, or -1 for the base model. */
  readonly loraSlot: number
  /**
   * Null: the row samples nothing (a prefill chunk that does not reach the prompt's end). Else a
   * causal row samples the token after its last position, and a verification row samples at every
   * node; the runner then walks the tree (see `StepOutput.walkEnds`).
   */
  readonly sampling: RowSampling | null
  /**
   * Prompt logprobs: `[n]` (or empty: none), for each position the token whose raw log-softmax is
   * wanted there (the next prompt token), -1 for none. A sampled position is never scored.
   */
  readonly scoreTargets: Int32Array
  /**
   * Medusa slot whose heads run where the row's sampling ends, or -1: at the last token of a causal
   * row, at the walk's end node of a verification row. Only with `sampling`.
   */
  readonly medusaSlot: number
  /**
   * How many of `medusaSlot`'s heads run: its first `medusaHeads` (head `d` drafts depth `d + 1`),
   * 1 to the slot's heads; 0 when `medusaSlot` is -1. The engine asks only for the depth the next
   * tree may use (a 1-candidate tree needs head 0 alone), since every head costs an LM-head row.
   */
  readonly medusaHeads: number
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
  /** Width of `StepOutput.topIds`: the largest `topLogprobs` of the rows' sampling (0..20). */
  readonly topLogprobs: number
  /** Best ids returned per Medusa head (`StepOutput.draftIds`); at least 1 when a row has heads. */
  readonly draftTopK: number
}

/**
 * What a step returns: chosen tokens, never logits (at vocabulary 128k and batch 64, logits are
 * 32 MB a step; the sampler runs where they are). A runner may reuse these arrays for its next
 * step (the native runner does), so read them before calling `step` again.
 */
export interface StepOutput {
  /**
   * `[S]`: the token chosen at every sampled position, rows in batch order (a causal row with
   * sampling has 1, a verification row one per node); -1 where the mask and warpers left no token;
   * -2 at a verification row's node that its walk never reaches, which a runner may leave
   * unsampled (the engine reads only the nodes its walk visits).
   */
  readonly tokens: Int32Array
  /** `[S]` each chosen token's raw log-softmax (before penalties, mask, temperature and warpers); 0 for -1. */
  readonly logprobs: Float32Array
  /**
   * `[S, StepBatch.topLogprobs]` the raw top logprobs of each sampled position by (logprob desc, id
   * asc), its first `RowSampling.topLogprobs` entries filled, the rest (-1, 0).
   */
  readonly topIds: Int32Array
  readonly topLogprobs: Float32Array
  /** `[Σ rows' scoreTargets ≥ 0]` the raw log-softmax of each scored target, rows and positions in order. */
  readonly scores: Float32Array
  /**
   * `[rows]` for a verification row, the node where the sample-and-match walk stops: from the root,
   * move to the first child whose token is the node's chosen token, until none is. -1 for other rows.
   */
  readonly walkEnds: Int32Array
  /**
   * `[Σ rows with heads, the row's medusaHeads, StepBatch.draftTopK]` each head's best ids at the
   * row's sampling end, best first, ties to the lower id (-1 past a head's non-NaN values).
   */
  readonly draftIds: Int32Array
}

/**
 * One forward step at a time. Calls to `step` never overlap (the engine awaits each); adapter
 * loads may run between steps. Heavy work must run off the JS thread: a step may run on it only
 * when it is known to be short (the native runner's `inline_step_max_us`). The engine yields to
 * the event loop after every step, so I/O is served between steps either way.
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
