import { randomUUID } from 'node:crypto'
import type { FinishReason, GenerationResult, TextToken } from '../../generation/generation-service.ts'
import { placeAll, type Placed } from './token-placer.ts'

/** OpenAI's finish reasons: a matched stop sequence and eos are both `stop`. */
export function openAiFinishReason(reason: FinishReason): 'stop' | 'length' {
  return reason === 'length' ? 'length' : 'stop'
}

export function completionId(prefix: 'chatcmpl' | 'cmpl'): string {
  return `${prefix}-${randomUUID().replace(/-/g, '')}`
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000)
}

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
}

/** Usage over all choices: the prompt counted once per distinct prompt, completions summed. */
export function usageOf(promptTokens: number, results: readonly GenerationResult[]): Usage {
  const completion = results.reduce((sum, r) => sum + r.generatedTokens, 0)
  return { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: promptTokens + completion }
}

function bytesOf(text: string): number[] {
  return [...Buffer.from(text, 'utf8')]
}

/**
 * One entry of a chat choice's `logprobs.content`: the token as placed in the returned text (cut
 * where a stop sequence cut it; exact bytes for part of a character), its alternatives as they are.
 */
export function chatTokenLogprob(placed: Placed<TextToken>) {
  const token = placed.token
  return {
    token: placed.shown,
    logprob: token.logprob,
    bytes: placed.bytes === null ? bytesOf(placed.shown) : [...placed.bytes],
    top_logprobs: (token.top ?? []).map((alt) => ({ token: alt.text, logprob: alt.logprob, bytes: bytesOf(alt.text) })),
  }
}

/** A chat choice's `logprobs` object. */
export function chatLogprobs(placed: readonly Placed<TextToken>[]) {
  return { content: placed.map(chatTokenLogprob), refusal: null }
}

/** A generated token's own string, which `TokenPlacer` places in the text. */
export function pieceOf(token: TextToken): string {
  return token.piece
}

/** Whether a stop sequence ended the choice (its text was cut, and tokens with it). */
export function stoppedBySequence(result: GenerationResult): boolean {
  return result.finishReason === 'stop_sequence'
}

/** A finished choice's generated tokens placed in its generated text. */
export function placedTokens(result: GenerationResult): Placed<TextToken>[] {
  return placeAll(result.generatedText, result.tokens, pieceOf, stoppedBySequence(result))
}
