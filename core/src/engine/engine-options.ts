import type { TokenConstraintFactory } from '../contracts/grammar.ts'
import type { Logger } from '../contracts/logger.ts'
import type { StepRunner } from '../contracts/step-runner.ts'
import type { ReadAdapter } from './adapter-registry.ts'
import type { PromptLookupOptions } from './medusa/prompt-lookup.ts'

/** Capacity limits of a `BatchingEngine` (the config's `limits:` section, camel-cased). */
export interface BatchingEngineLimits {
  /** Most sequences in one step. */
  readonly maxBatchSize: number
  /** Most prompt tokens prefilled in one step; longer prompts are prefilled in chunks. */
  readonly maxBatchPrefillTokens: number
  /** Requests accepted at once (queued + running); `submit` throws `overloaded` beyond it. */
  readonly maxConcurrentRequests: number
  /** Longest prompt + generation; capped by the model's context length. Absent: the model's. */
  readonly maxTotalTokens?: number
}

/**
 * Speculation policy: Medusa for requests whose `speculator` is set, prompt lookup (when
 * configured) for the others. Every option has a default; the engine speculates whenever a request
 * carries Medusa heads.
 */
export interface SpeculationOptions {
  /**
   * The sparse candidate tree as Medusa's `medusa_choices` (paths of top-k ranks, each path's
   * parent listed too). Default `DEFAULT_MEDUSA_CHOICES` (25 candidates, depth 4).
   */
  readonly choices?: readonly (readonly number[])[]
  /**
   * Speculation is off for a step when more sequences than this are running: verification then
   * costs more than it saves (LoRAX's `--speculation-max-batch-size`). Default 32.
   */
  readonly maxBatchSize?: number
  /**
   * Most candidate tokens one step may verify, over all rows. Rows that would exceed it get a
   * smaller tree (a prefix of it) or decode plainly; the rows that went longest without
   * speculating are served first. Default 256.
   */
  readonly maxTokens?: number
  /**
   * Choose the tree size (a prefix of `choices`) every step from measured step times and
   * acceptance rates, down to plain decoding when no tree pays off (see `AdaptiveTreePolicy`).
   * Changes speed only, never outputs. Default true; false always uses the largest tree that fits.
   */
  readonly adaptive?: boolean
  /**
   * Prompt lookup (n-gram) drafting for requests without Medusa heads (LoRAX and TGI's n-gram
   * speculation): candidates are the tokens that followed the latest earlier occurrence of the
   * row's last n-gram, verified by the same lossless path. Absent, or `draftTokens` 0: off.
   */
  readonly promptLookup?: PromptLookupOptions
  /**
   * With prompt lookup on, what drafts for a request that has Medusa heads: `learned` (default)
   * picks its heads or prompt lookup per adapter × speculator from the decode speed each gave the
   * key's finished requests (`DrafterChoice`); `heads` always uses the heads.
   */
  readonly drafterChoice?: 'learned' | 'heads'
}

export interface BatchingEngineOptions {
  readonly runner: StepRunner
  readonly limits: BatchingEngineLimits
  /** Parses an adapter's files into weights for `runner.loadAdapter`. */
  readonly readAdapter: ReadAdapter
  readonly logger: Logger
  /** Backend name for `/info`, e.g. `cuda-native:cpu`. */
  readonly name: string
  /** Device shown in capabilities; absent: the runner's `ModelSpec.device`. */
  readonly device?: string
  /** LoRA target modules the runner supports; absent: all of `LORA_MODULES` (none without slots). */
  readonly loraTargetModules?: readonly string[]
  /**
   * Longest a device load may wait for a slot while every slot is pinned by queued or running
   * requests, before failing with `adapter_slots_full`. Default 30 000.
   */
  readonly adapterLoadTimeoutMs?: number
  /**
   * Host memory for parsed adapter weights kept so an adapter evicted from its device slot reloads
   * without reading its files again (LRU, measured as the typed arrays' byteLength). Default 1 GiB.
   */
  readonly hostCacheBytes?: number
  /** Medusa speculation policy; absent: the defaults of `SpeculationOptions`. */
  readonly speculation?: SpeculationOptions
  /**
   * The matchers for requests with a `grammar` (the server's structured-output engine, which it
   * creates once the model is loaded: read at each such request). Absent or null: those requests
   * are refused with `grammar_unsupported`.
   */
  readonly constraints?: () => TokenConstraintFactory | null
  /** Clock in milliseconds, for `queueMs` (tests may inject one). Default `performance.now`. */
  readonly now?: () => number
  /** Called after every step the runner ran or failed (the server's `loom_batch_*` metrics). */
  readonly onStep?: (step: EngineStep) => void
}

/** One runner step, as `onStep` reports it. */
export interface EngineStep {
  /** `prefill` when any row prefills prompt tokens, else `decode` (LoRAX's batch methods). */
  readonly method: 'prefill' | 'decode'
  /** Rows (sequences) in the step. */
  readonly size: number
  /** The runner's step, in seconds. */
  readonly durationS: number
  readonly ok: boolean
}
