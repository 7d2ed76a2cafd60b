import type { ResponseFormat } from '../contracts/grammar.ts'

/**
 * A request in text space after HTTP validation, shared by the native and v1 routes. Everything
 * is range-checked; what still needs the tokenizer or the model (prompt length against limits) is
 * checked by `prepare-request.ts`.
 */
export interface GenerationRequest {
  /** Prompt text, already templated for chat. */
  readonly prompt: string
  /** Whether the tokenizer adds BOS/EOS (false for templated chat prompts, which carry them). */
  readonly addSpecialTokens: boolean
  /** Base model (null) or one adapter as the request named it. */
  readonly adapter: { readonly source: string; readonly id: string } | null
  /** The caller's adapter token (`api_token` or `Authorization: Bearer`). Never logged. */
  readonly apiToken: string | undefined
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
}
