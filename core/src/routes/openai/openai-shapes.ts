import { randomUUID } from 'node:crypto'
import type { FinishReason, GenerationResult, TextToken } from '../../generation/generation-service.ts'

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

/** One entry of a chat choice's `logprobs.content`. */
export function chatTokenLogprob(token: TextToken) {
  return {
    token: token.piece,
    logprob: token.logprob,
    bytes: bytesOf(token.piece),
    top_logprobs: (token.top ?? []).map((alt) => ({ token: alt.text, logprob: alt.logprob, bytes: bytesOf(alt.text) })),
  }
}
