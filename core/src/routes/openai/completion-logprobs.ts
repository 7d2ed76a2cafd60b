import type { GenerationResult, PrefillToken, TextToken } from '../../generation/generation-service.ts'
import { stoppedBySequence } from './openai-shapes.ts'
import { placeAll, type Placed } from './token-placer.ts'

/** One row of the legacy completions `logprobs` arrays, before it is placed in the text. */
export interface CompletionLogprob {
  readonly piece: string
  /** Null for the first prompt token, which nothing predicts. */
  readonly logprob: number | null
  /** Alternatives by their strings; null for prompt tokens (only generated tokens have them). */
  readonly top: Readonly<Record<string, number>> | null
}

export function promptLogprob(token: PrefillToken): CompletionLogprob {
  return { piece: token.text, logprob: token.logprob, top: null }
}

export function generatedLogprob(token: TextToken): CompletionLogprob {
  return {
    piece: token.piece,
    logprob: token.logprob,
    top: Object.fromEntries((token.top ?? []).map((alt) => [alt.text, alt.logprob])),
  }
}

export function completionPiece(row: CompletionLogprob): string {
  return row.piece
}

/**
 * The legacy `logprobs` object for placed rows. `text_offset` holds UTF-16 indices into the
 * choice's `text` (JS string indices; OpenAI does not define the unit, and these let a client slice
 * `text` directly): streamed chunks count from the start of the streamed text.
 */
export function completionLogprobs(placed: readonly Placed<CompletionLogprob>[]) {
  return {
    tokens: placed.map((p) => p.shown),
    token_logprobs: placed.map((p) => p.token.logprob),
    top_logprobs: placed.map((p) => p.token.top),
    text_offset: placed.map((p) => p.offset),
  }
}

/**
 * A finished choice's `logprobs`: with `echo`, the prompt's tokens first (BOS included, at offset
 * 0 with no text), all placed in `text`, the choice's text as returned.
 */
export function choiceLogprobs(text: string, result: GenerationResult, echo: boolean) {
  const rows = [...(echo ? result.prefill.map(promptLogprob) : []), ...result.tokens.map(generatedLogprob)]
  return completionLogprobs(placeAll(text, rows, completionPiece, stoppedBySequence(result)))
}
