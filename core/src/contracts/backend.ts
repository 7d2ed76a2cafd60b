import type { AdapterHandle, LocalAdapter } from './adapter.ts'
import type { ResponseFormat } from './grammar.ts'
import type { SamplingParams, TokenLogprob } from './sampling.ts'

/** What a backend can do; the core validates requests against it before they are submitted. */
export interface BackendCapabilities {
  /** Name shown in `/info` (e.g. `cuda-native:cpu`, `trtllm`). */
  readonly name: string
  /** The device the model runs on (`cpu`, `cuda`). */
  readonly device: string
  /** Weight dtype as loaded (`float32`, `float16`, `bfloat16`). */
  readonly dtype: string
  /** Longest sequence (prompt + generated) the model accepts. */
  readonly maxContextLength: number
  readonly vocabSize: number
  /** Largest LoRA rank the backend can load; 0 when LoRA is unsupported. */
  readonly maxLoraRank: number
  /**
   * How many adapters can be resident on the device at once (the slots a batch's adapters share;
   * vLLM's `max_loras`); requests for others wait until one is free. 0 when LoRA is unsupported.
   */
  readonly adapterSlots: number
  /** Projection names LoRA may target (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`). */
  readonly loraTargetModules: readonly string[]
  /** Whether Medusa heads can be loaded and used for speculation. */
  readonly medusa: boolean
  /** Whether `BackendRequest.grammar` is honoured; without it, `submit` refuses a request with one (`grammar_unsupported`, saying why). */
  readonly structuredOutput: boolean
  /** Base model architecture facts an adapter must match (`hidden_size`, `num_hidden_layers`, …). */
  readonly modelShape: Readonly<Record<string, number | string>>
}

/** A validated generation request in token space. */
export interface BackendRequest {
  /** Unique per server; appears in logs and metrics. */
  readonly id: string
  /** Prompt token ids, already truncated to the limits. Never empty. */
  readonly inputIds: readonly number[]
  /** Hard cap on generated tokens (already bounded by the context length). */
  readonly maxNewTokens: number
  readonly sampling: SamplingParams
  /** Tokens that end generation with `eos_token` (from `generation_config.json`); empty with `ignore_eos_token`. */
  readonly eosTokenIds: readonly number[]
  /** LoRA adapter for this request, or null for the base model. */
  readonly adapter: AdapterHandle | null
  /** Medusa heads to speculate with, or null for plain decoding. */
  readonly speculator: AdapterHandle | null
  /**
   * The output grammar as data: the validated `response_format` (a JSON schema, or any JSON
   * object), or null. The core has checked that it compiles; each backend honours it its own way
   * (the core's `BatchingEngine` builds a token matcher for its sampler, TensorRT-LLM compiles it
   * for its guided decoding).
   */
  readonly grammar: ResponseFormat | null
  /** How many alternatives per generated token to report (0: none). */
  readonly topLogprobs: number
  /** Whether to report a logprob for every prompt token (`decoder_input_details`, `echo` + `logprobs`). */
  readonly prefillLogprobs: boolean
  /** Aborting cancels the request: it leaves its batch and frees its KV memory at the next step boundary. */
  readonly signal: AbortSignal
}

/** Why a sequence stopped, as the backend saw it (stop sequences are applied by the core). */
export type BackendFinishReason = 'length' | 'eos_token' | 'cancelled'

/** A generated token as streamed back. */
export interface GeneratedToken extends TokenLogprob {
  /** True for extra tokens accepted in the same step by speculative decoding. */
  readonly skipped: boolean
  /** The `topLogprobs` most likely alternatives, most likely first. */
  readonly top?: readonly TokenLogprob[]
}

/** Events of one request, in order: `prefill`? → `tokens`* → `finish` (or the stream throws). */
export type GenerationEvent =
  | { readonly type: 'prefill'; readonly tokens: readonly (TokenLogprob | { id: number; logprob: null })[] }
  | { readonly type: 'tokens'; readonly tokens: readonly GeneratedToken[] }
  | {
      readonly type: 'finish'
      readonly reason: BackendFinishReason
      /** Wall-clock milliseconds spent queued before the first step that included this request. */
      readonly queueMs: number
    }

/** Counters a backend exposes for `/metrics` and tests. */
export interface BackendStats {
  readonly runningRequests: number
  readonly queuedRequests: number
  readonly kvBlocksTotal: number
  readonly kvBlocksFree: number
  readonly loadedAdapters: number
  /** Distinct LoRA adapters (`AdapterHandle.id`) of the requests running now, first seen first. */
  readonly runningAdapters: readonly string[]
  /** Distinct LoRA adapters of the requests waiting to run, first seen first. */
  readonly waitingAdapters: readonly string[]
}

/** The stats of a backend with nothing loaded or running (before `start`, after shutdown). */
export const IDLE_BACKEND_STATS: BackendStats = Object.freeze({
  runningRequests: 0,
  queuedRequests: 0,
  kvBlocksTotal: 0,
  kvBlocksFree: 0,
  loadedAdapters: 0,
  runningAdapters: Object.freeze([]),
  waitingAdapters: Object.freeze([]),
})

/**
 * Request-level backend: runs the base model, owns batching, and streams token events.
 * The core's `BatchingEngine` implements it on top of any `StepRunner`; TensorRT-LLM's Executor
 * implements it directly.
 *
 * Lifecycle: `start()` once, then `submit`/`loadAdapter` concurrently; `close()` drains (refuses
 * new work, finishes running requests); `destroy(err)` aborts everything. Both are idempotent.
 */
export interface Backend {
  /** Load the model and warm up. Resolves when the backend can accept requests (`/health` turns 200). */
  start(): Promise<void>
  /** Valid after `start()` resolves. */
  capabilities(): BackendCapabilities

  /**
   * Load an adapter's weights (already validated against `capabilities()`) so requests can use it.
   * Loading the same key twice returns the same handle. Throws `adapter_load_failed` with a reason.
   */
  loadAdapter(adapter: LocalAdapter): Promise<AdapterHandle>
  /** Free an adapter once no running request uses it; requests still holding it keep it alive until they end. */
  unloadAdapter(handle: AdapterHandle): Promise<void>

  /**
   * Start generating. The returned iterable yields the request's events; breaking out of it (or
   * aborting `request.signal`) cancels the request. Throws `overloaded` synchronously when the backend's
   * queue is full.
   */
  submit(request: BackendRequest): AsyncIterable<GenerationEvent>

  stats(): BackendStats
  /** Stop accepting work and wait for running requests to finish. */
  close(): Promise<void>
  /** Abort all work now; pending iterables throw `err` (or `server_closing`). */
  destroy(err?: Error): void
}

/** Injection token for the one `Backend` of a server. */
export const Backend: unique symbol = Symbol('Backend')
