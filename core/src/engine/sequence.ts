import type { BackendRequest, GenerationEvent } from '../contracts/backend.ts'
import type { TokenConstraint } from '../contracts/grammar.ts'
import type { TokenLogprob } from '../contracts/sampling.ts'
import type { EventChannel } from './event-channel.ts'
import type { Draft } from './medusa/draft.ts'
import type { SamplingState } from './sampler/sampling-state.ts'

export type SequenceState = 'queued' | 'running' | 'finished'

/** What proposes a sequence's candidate tokens: Medusa heads, prompt lookup (n-gram), or nothing. */
export type Drafter = 'medusa' | 'prompt-lookup' | null

/** A prompt token's logprob as the `prefill` event reports it (the first token has none). */
export type PrefillToken = TokenLogprob | { id: number; logprob: null }

/**
 * One request inside the engine. Its KV cache holds `tokens[0, cacheLen)`; the tokens still to be
 * fed are `tokens[cacheLen, tokens.length)` — the prompt (or a chunk of it) at first, then the one
 * token sampled last step. Preemption drops the cache (`cacheLen = 0`, no blocks), so the next
 * admission recomputes prompt + generated tokens in one prefill.
 */
export class Sequence {
  readonly seqId: number
  readonly request: BackendRequest
  /** Round-robin queue key: the adapter key, or `base`. */
  readonly queueKey: string
  readonly promptLength: number
  /** Prompt followed by the generated tokens. */
  readonly tokens: number[]
  readonly sampling: SamplingState
  readonly channel: EventChannel<GenerationEvent>
  readonly submittedAt: number

  /** What drafts its speculation: its Medusa heads, prompt lookup, or nothing (plain decoding). */
  readonly drafter: Drafter
  /** Its (adapter, drafter) key in the adaptive tree policy (`speculationKey`); '' without a drafter. */
  readonly policyKey: string
  /**
   * Its key in the drafter choice (`DrafterChoice`) when its drafter was chosen between its heads
   * and prompt lookup; null otherwise. Its decode speed is recorded there when it finishes.
   */
  readonly choiceKey: string | null
  /** When its first generated token was emitted (decode speed is timed from there); null before. */
  firstTokenAt: number | null = null

  state: SequenceState = 'queued'
  /**
   * Adapter slot of its rows (-1: base model). Set at each admission: a queued request's adapter
   * may still be loading, and its slot is known only once it is resident (it is then pinned).
   */
  loraSlot = -1
  /** Medusa slot of its speculator (-1: none or not admitted yet); set at each admission like `loraSlot`. */
  medusaSlot = -1
  /** Candidates for the next step (from the heads at the last sampled position, or prompt lookup), or null. */
  draft: Draft | null = null
  /** The policy key its last planned tree was chosen under (`draftKey` of its draft); verification records there. */
  treeKey = ''
  /**
   * Its prompt-lookup policy keys by match length (`lookupKey`'s, at index n), built as asked: a
   * lookup row's plan asks each length's key on every step.
   */
  readonly lookupKeys: string[] = []
  /**
   * Cache moves that compact the branch accepted last step (`from[i]` → `to[i]`), sent as a
   * `KvCopy` with the sequence's next row; null when there is nothing to move.
   */
  pendingCopy: { from: number[]; to: number[] } | null = null
  /** Plan number of the last step that verified a tree for it (tree budget goes to the longest waiting). */
  lastVerifyPlan = 0
  generated = 0
  cacheLen = 0
  blocks: number[] = []
  /** When the sequence first joined a step (for `queueMs`). */
  firstScheduledAt: number | null = null
  /** Increases with every admission; the running sequence with the largest is preempted first. */
  admittedOrder = 0
  /** True once the prompt has been fully processed and the first token sampled. */
  prefillDone = false
  /** Prompt logprobs gathered chunk by chunk, when the request asked for them (first token: null). */
  prefillTokens: PrefillToken[] | null
  /** How many times the sequence lost its KV cache to preemption. */
  preemptions = 0
  /** Removes the abort listener from the request's signal. */
  detachSignal: (() => void) | null = null
  /**
   * The matcher of the request's `grammar` (null without one), built by the engine before the
   * sequence is queued and disposed when it leaves; it advances with every accepted token.
   */
  constraint: TokenConstraint | null = null

  constructor(init: {
    seqId: number
    request: BackendRequest
    queueKey: string
    sampling: SamplingState
    channel: EventChannel<GenerationEvent>
    submittedAt: number
    drafter?: Drafter
    policyKey?: string
    choiceKey?: string | null
  }) {
    this.seqId = init.seqId
    this.request = init.request
    this.queueKey = init.queueKey
    this.sampling = init.sampling
    this.channel = init.channel
    this.submittedAt = init.submittedAt
    this.drafter = init.drafter ?? null
    this.policyKey = init.policyKey ?? ''
    this.choiceKey = init.choiceKey ?? null
    this.tokens = [...init.request.inputIds]
    this.promptLength = this.tokens.length
    this.prefillTokens = init.request.prefillLogprobs ? [{ id: this.tokens[0]!, logprob: null }] : null
  }

  /** Tokens not yet in the KV cache. */
  get pending(): number {
    return this.tokens.length - this.cacheLen
  }

  /** Whether the next row is a single decode token (the cache holds everything before it). */
  get decoding(): boolean {
    return this.cacheLen > 0 && this.tokens.length - this.cacheLen === 1
  }
}
