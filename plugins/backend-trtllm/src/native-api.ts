/**
 * The JS surface of the TensorRT-LLM addon (`build/Release/loom_trtllm.node`), as `loadTrtllm()` in
 * `load-native.ts` returns it. The addon wraps our C ABI (`native/include/loom-trtllm.h`), behind which
 * either TensorRT-LLM's Executor (`impl: 'tensorrt-llm'`) or a deterministic fake (`impl: 'fake'`) is
 * linked.
 *
 * Threads and delivery: `create` starts a native poller thread that loops on the executor's
 * `await(timeout)` and hands each non-empty batch of responses to the `onResponses` callback on the JS
 * thread (through a `Napi::ThreadSafeFunction`), in the order the executor produced them. Every
 * enqueued request gets exactly one response with `final: true` (finished, cancelled, failed, or cut off
 * by shutdown). While any request is outstanding the executor keeps the event loop alive; an idle one
 * does not.
 *
 * Errors: every method throws (or rejects with) a `LoomError` (core/src/errors/registry.ts):
 * `server_closing` after shutdown, `overloaded` when the queue is full, `model_invalid` when the engine
 * cannot be loaded, `grammar_unsupported` for a JSON schema on a build without guided decoding, and
 * `native_error` for invalid arguments (the message names the field and the values) or anything else
 * the executor reports. Per-request failures are not thrown: they arrive as a final response with
 * `finishReason: 'error'`, an `errorKind` and the executor's `error` text verbatim.
 */

/** Which implementation of the C ABI the addon links. */
export type NativeImpl = 'fake' | 'tensorrt-llm'

/** Executor options; absent numbers mean "the implementation's default". */
export interface NativeExecutorOptions {
  /** Directory with `config.json` and `rank<N>.engine` (the fake reads nothing from it). */
  readonly engineDir: string
  /** Requests scheduled together; more wait in the executor's queue. Default: the engine's maximum. */
  readonly maxBatchSize?: number
  /** Tokens per iteration. Default: the engine's maximum. */
  readonly maxNumTokens?: number
  /** Queued requests beyond which `enqueue` throws `overloaded`. Default: unbounded. */
  readonly maxQueueSize?: number
  /** Share of free GPU memory for the KV cache, in (0, 1]. Default 0.9. */
  readonly kvCacheFreeGpuMemoryFraction?: number
  /** Upper bound of KV cache tokens. */
  readonly kvCacheMaxTokens?: number
  /** KV cache block reuse across requests. Default false (set explicitly: TensorRT-LLM's default changed). */
  readonly enableKvCacheBlockReuse?: boolean
  /** Chunked context. Default false (set explicitly: TensorRT-LLM's default changed). */
  readonly enableChunkedContext?: boolean
  /**
   * LoRA cache size in module-layers (rows of a LoRA config tensor at the maximum rank), host level.
   * The fake's cache holds this many rows in all and evicts the least recently used task that no
   * running request uses.
   */
  readonly loraCacheHostModuleLayers?: number
  /** LoRA cache size in module-layers, GPU level (TensorRT-LLM only). */
  readonly loraCacheDeviceModuleLayers?: number
  /** Host LoRA cache in bytes, used when `loraCacheHostModuleLayers` is absent (TensorRT-LLM only). */
  readonly loraCacheHostBytes?: number
  /** GPU LoRA cache as a share of free memory, used when `loraCacheDeviceModuleLayers` is absent. */
  readonly loraCacheDevicePercent?: number
  /** Medusa tree, every path listed (`[[0], [0, 0], [1], …]`); absent: no Medusa. */
  readonly medusaChoices?: readonly (readonly number[])[]
  /** Tensor and pipeline parallel sizes (default 1 each). */
  readonly tensorParallel?: number
  readonly pipelineParallel?: number
  /** CUDA device ids, one per rank; default 0..tp·pp-1. */
  readonly deviceIds?: readonly number[]
  /**
   * How the tp·pp ranks run (default `auto`: `single` for one GPU, `orchestrator` for more).
   * `orchestrator`: this process enqueues and awaits while the executor spawns tp·pp processes of
   * `workerPath` with MPI; `leader`: every MPI rank runs the caller (not usable by Loom's server).
   */
  readonly parallelMode?: NativeParallelMode
  /** TensorRT-LLM's `executorWorker` (orchestrator mode): an existing executable file, else `create` rejects. */
  readonly workerPath?: string
  /** Iterations of statistics the executor keeps (default 1000). */
  readonly iterStatsMaxIterations?: number
  /**
   * Guided decoding (xgrammar), needed for `guidedJsonSchema` on builds with `capabilities.guidedDecoding`:
   * the vocabulary as strings indexed by token id, the tokenizer.json text, and the ids that end a
   * guided sequence.
   */
  readonly guidedDecoding?: {
    readonly encodedVocab: readonly string[]
    readonly tokenizerJson?: string
    readonly stopTokenIds?: readonly number[]
  }
  /** The fake's knobs (ignored by TensorRT-LLM). */
  readonly fake?: NativeFakeOptions
}

/** The executor's communication mode (TensorRT-LLM's `CommunicationMode`, plus `single`: none). */
export type NativeParallelMode = 'auto' | 'single' | 'leader' | 'orchestrator'

/** What an executor was created with, as the implementation resolved it (`executor.info()`). */
export interface NativeExecutorInfo {
  /** The effective mode (never `auto`). */
  readonly parallelMode: Exclude<NativeParallelMode, 'auto'>
  /** tensor_parallel × pipeline_parallel. */
  readonly worldSize: number
  /** Worker processes the executor spawns: `worldSize` in orchestrator mode, else 0. */
  readonly spawnedWorkers: number
  /** The `executorWorker` given (orchestrator mode only). */
  readonly workerPath?: string
  /** CUDA device ids as given (empty: the executor's default). */
  readonly deviceIds: readonly number[]
}

/**
 * The fake's "model": one step every `stepUs` microseconds adds `tokensPerStep` tokens to each running
 * request. Token `i` (0-based position in the output) of a request is
 *
 *   h = fnv1a64(prompt ids as int32 little-endian bytes, then taskId as u64, then seed as u64
 *               (0 when absent), then the bits of float32 temperature as u32, then i as u32)
 *   m = splitmix64's finalizer of h (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
 *       z *= 0x94d049bb133111eb; z ^= z >> 31)
 *   token = m mod vocabSize
 *
 * where taskId is 0 without LoRA and every field is hashed in little-endian byte order; `fakeToken`
 * below computes the same. Log probability of a token = -((m >> 32) mod 1000) / 100. An end id is not
 * part of the output (it ends the request); a stop word's tokens are.
 */
export interface NativeFakeOptions {
  /** Microseconds per step (default 1000). */
  readonly stepUs?: number
  /** Tokens added per step to each running request (default 1). */
  readonly tokensPerStep?: number
  /** Vocabulary size of the token function (default 32000). */
  readonly vocabSize?: number
}

/** Element type of LoRA weights: the engine's dtype (fp16/bf16 as raw 16-bit words). */
export type NativeLoraDtype = 'float16' | 'bfloat16' | 'float32'

/** TensorRT-LLM's LoRA tensors, already in its layout (see native/include/loom-trtllm.h). */
export interface NativeLoraWeights {
  /** `[moduleLayers, maxRow]`; Uint16Array for float16/bfloat16 (raw bits), Float32Array for float32. */
  readonly weights: Uint16Array | Float32Array
  readonly dtype: NativeLoraDtype
  readonly weightsShape: readonly [number, number]
  /** `[moduleLayers, 3]` rows of (module id, layer, rank); `[moduleLayers, 4]` adds is_dora. */
  readonly config: Int32Array
  readonly configShape: readonly [number, number]
}

/** LoRA of one request: the task id alone while the executor caches it, else with its tensors. */
export interface NativeLora {
  /** Loom's task id for the adapter revision: a safe integer >= 0. */
  readonly taskId: number
  /** Absent: the task must be cached, else the response has `errorKind: 'lora_not_cached'`. */
  readonly tensors?: NativeLoraWeights
}

/** Sampling of one request (beam width 1). Greedy is `topK: 1`. */
export interface NativeSampling {
  /** 0: off. */
  readonly topK: number
  /** 0: off. */
  readonly topP: number
  /** > 0. */
  readonly temperature: number
  /** 1: off. */
  readonly repetitionPenalty: number
  /** 0: off. */
  readonly presencePenalty: number
  /** 0: off. */
  readonly frequencyPenalty: number
  /** A 64-bit unsigned seed; absent: the executor's default. */
  readonly seed?: bigint
  /** Tokens to generate before an end id or stop word may end the request (0: none). */
  readonly minTokens?: number
}

/** One generation request, checked by the Backend before it reaches the addon. */
export interface NativeRequest {
  /** Prompt token ids; at least one. */
  readonly inputIds: Int32Array
  /** New tokens at most, >= 1. */
  readonly maxTokens: number
  /** true: a response per step with the new tokens; false: one final response with all of them. */
  readonly streaming: boolean
  readonly sampling: NativeSampling
  /** The end id (reason `end_id`); other end ids go in `stopWords` as one-token words. */
  readonly endId?: number
  readonly padId?: number
  /** Token sequences that end the request (reason `stop_words`); the words' tokens are in the output. */
  readonly stopWords?: readonly Int32Array[]
  /** Token sequences the executor never generates. */
  readonly badWords?: readonly Int32Array[]
  /** Echoed in every response (a safe integer >= 0). */
  readonly clientId?: number
  /** Responses carry each token's log probability. */
  readonly returnLogProbs?: boolean
  readonly lora?: NativeLora
  /** A JSON schema for guided decoding; needs `capabilities.guidedDecoding`. */
  readonly guidedJsonSchema?: string
}

/** TensorRT-LLM's finish reasons, plus `error` for an error response. */
export type NativeFinishReason =
  'not_finished' | 'end_id' | 'stop_words' | 'length' | 'timed_out' | 'cancelled' | 'error'

/** What an error response means; `error` keeps the executor's text verbatim. */
export type NativeErrorKind = 'lora_not_cached' | 'lora_cache_full' | 'invalid_request' | 'shut_down' | 'internal'

/** One response of one request. */
export interface NativeResponse {
  /** The id `enqueue` returned. */
  readonly requestId: number
  readonly clientId?: number
  /** Tokens since the previous response (streaming) or all of them (not streaming); never the prompt. */
  readonly tokens: Int32Array
  /** Natural-log probability per token, when requested and available. */
  readonly logProbs?: Float32Array
  /** The request's last response. */
  readonly final: boolean
  readonly finishReason: NativeFinishReason
  /** Set on error responses (always final). */
  readonly errorKind?: NativeErrorKind
  readonly error?: string
}

/** The latest executor iteration and the LoRA cache. -1 where the implementation does not say. */
export interface NativeStats {
  readonly iteration: number
  readonly activeRequests: number
  readonly queuedRequests: number
  readonly maxActiveRequests: number
  readonly kvBlocksMax: number
  readonly kvBlocksFree: number
  readonly kvBlocksUsed: number
  readonly kvTokensPerBlock: number
  readonly iterationLatencyMs: number
  readonly loraTasksCached: number
  readonly loraCacheModuleLayersUsed: number
  readonly loraCacheModuleLayersTotal: number
}

/** Compile-time facts of the linked implementation. */
export interface NativeCapabilities {
  readonly impl: NativeImpl
  /** The implementation's version text (TensorRT-LLM's version, or the fake's). */
  readonly version: string
  /** The C ABI version the addon was built with. */
  readonly abiVersion: number
  /** A request's `guidedJsonSchema` is honoured. */
  readonly guidedDecoding: boolean
  /** `medusaChoices` are honoured. */
  readonly medusa: boolean
  /** The `libtensorrt_llm.so` the addon runs on (absent for the fake): `executorWorker` is installed near it. */
  readonly libraryPath?: string
}

/** A running executor. */
export interface NativeExecutor {
  /** Queue a request; returns its id (> 0). Throws on invalid arguments, a full queue, or after shutdown. */
  enqueue(request: NativeRequest): number
  /** Ask to stop a request; its final response (`cancelled`) follows. Unknown or finished ids: no-op. */
  cancel(requestId: number): void
  /** The latest statistics (cheap; safe to call per scrape). */
  stats(): NativeStats
  /** What the executor was created with (answers after shutdown too). */
  info(): NativeExecutorInfo
  /**
   * Refuse new work, end every unfinished request with a final `shut_down` error response, deliver the
   * remaining responses, stop the poller thread and free the executor. Resolves after the last
   * `onResponses` call; idempotent (later calls return the same promise).
   */
  shutdown(): Promise<void>
}

/** Receives each batch of responses on the JS thread. It must not throw (a throw is reported as uncaught). */
export type NativeResponsesCallback = (responses: readonly NativeResponse[]) => void

/** The addon, as `loadTrtllm()` returns it. */
export interface TrtllmAddon {
  readonly capabilities: NativeCapabilities
  /** Load the engine and start the executor and its poller thread, off the JS thread. */
  create(options: NativeExecutorOptions, onResponses: NativeResponsesCallback): Promise<NativeExecutor>
}

const FNV_OFFSET = 0xcbf29ce484222325n
const FNV_PRIME = 0x100000001b3n
const MASK64 = (1n << 64n) - 1n

/** What the fake hashes for token `position` of a request (see `NativeFakeOptions`). */
export interface FakeTokenInput {
  readonly inputIds: ArrayLike<number>
  /** 0 without LoRA. */
  readonly taskId: number
  /** 0n when absent. */
  readonly seed: bigint
  readonly temperature: number
  readonly position: number
}

/** The fake's token `position` and its log probability: the reference the fake's C++ must match. */
export function fakeToken(input: FakeTokenInput, vocabSize: number): { token: number; logProb: number } {
  const bytes = new DataView(new ArrayBuffer(input.inputIds.length * 4 + 8 + 8 + 4 + 4))
  let o = 0
  for (let i = 0; i < input.inputIds.length; i++, o += 4) bytes.setInt32(o, input.inputIds[i] ?? 0, true)
  bytes.setBigUint64(o, BigInt(input.taskId), true)
  bytes.setBigUint64(o + 8, input.seed, true)
  bytes.setFloat32(o + 16, input.temperature, true)
  bytes.setUint32(o + 20, input.position, true)
  let h = FNV_OFFSET
  for (let i = 0; i < bytes.byteLength; i++) h = ((h ^ BigInt(bytes.getUint8(i))) * FNV_PRIME) & MASK64
  let m = h
  m = ((m ^ (m >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64
  m = ((m ^ (m >> 27n)) * 0x94d049bb133111ebn) & MASK64
  m ^= m >> 31n
  return { token: Number(m % BigInt(vocabSize)), logProb: -Number((m >> 32n) % 1000n) / 100 }
}
