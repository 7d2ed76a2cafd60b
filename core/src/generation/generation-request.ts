import type { MergedAdaptersRequest } from '../adapters/merge/merge-params.ts'
import type { ResponseFormat } from '../contracts/grammar.ts'
import type { ChatMessage } from '../contracts/template-engine.ts'

/**
 * A request in text space after HTTP validation, shared by the native and v1 routes. Everything
 * is range-checked; what still needs the tokenizer or the model (prompt length against limits) is
 * checked by `prepare-request.ts`.
 */
export interface GenerationRequest {
  /**
   * Prompt text, or chat messages rendered with the adapter's or the base model's chat template
   * once the adapter is known (templated prompts carry their own BOS, so no special tokens are added).
   */
  readonly prompt: string | readonly ChatMessage[]
  /** The `model` value the client sent (for template errors); empty for native requests. */
  readonly requestedModel: string
  /** Native API: generated text ends with the matched stop sequence; OpenAI API: it is cut off. */
  readonly includeStopSequence: boolean
  /** Base model (null) or one adapter as the request named it. */
  readonly adapter: { readonly source: string; readonly id: string } | null
  /** Adapters to merge into one for this request (`merged_adapters`); exclusive with `adapter`. */
  readonly mergedAdapters?: MergedAdaptersRequest | null
  /** The caller's adapter token (`api_token` or `Authorization: Bearer`). Never logged. */
  readonly apiToken: string | undefined
  /**
   * `apiToken` came from the `Authorization` header, not the body: it may be an SDK's api key or a
   * gateway credential, so a source sees it only for adapters that need a token.
   */
  readonly apiTokenFromHeader?: boolean
  readonly sampling: {
    readonly temperature: number
    readonly topK: number
    readonly topP: number
    readonly typicalP: number
    readonly repetitionPenalty: number
    readonly frequencyPenalty: number
    readonly presencePenalty: number
    /** Explicit seed, or undefined to draw one. */
    readonly seed: bigint | undefined
  }
  /** Null: up to the context limit. */
  readonly maxNewTokens: number | null
  readonly stop: readonly string[]
  /** Keep only the last N prompt tokens. */
  readonly truncate: number | null
  readonly ignoreEos: boolean
  readonly topLogprobs: number
  readonly prefillLogprobs: boolean
  readonly responseFormat: ResponseFormat | null
}

/** Limits the validators enforce, resolved at startup from config and the model. */
export interface RequestLimits {
  readonly maxInputLength: number
  readonly maxTotalTokens: number
  readonly maxStopSequences: number
  readonly maxTopLogprobs: number
  /**
   * Sequences the server holds at once (`limits.max_concurrent_requests`): a request whose
   * choices × prompts exceed it can never be admitted. Absent: not checked.
   */
  readonly maxSequences?: number
}
