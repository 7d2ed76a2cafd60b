import type { StartedGeneration, TextToken } from '../../generation/generation-service.ts'
import { chatLogprobs, openAiFinishReason, pieceOf, stoppedBySequence } from './openai-shapes.ts'
import type { ChatRequest } from './parse-chat-body.ts'
import type { ChoiceStreamShape } from './stream-choices.ts'
import { TokenPlacer, type Placed } from './token-placer.ts'

/**
 * How a chat stream's chunks look: a role chunk first, then a content delta per token. With
 * `logprobs`, each chunk lists the tokens whose place in the text is settled by then, so a token
 * whose text is still held back (a possible stop sequence) is listed with the chunk that releases it,
 * or left out when the stop sequence removes it: the listed tokens join to the streamed content.
 */
export function chatStreamShape(
  chat: ChatRequest,
  started: readonly StartedGeneration[],
  envelope: Readonly<Record<string, unknown>>,
): ChoiceStreamShape {
  const placers = started.map(() => new TokenPlacer<TextToken>(pieceOf))
  // A content chunk, or null when it would carry nothing (no text, no settled token).
  const content = (index: number, text: string, placed: readonly Placed<TextToken>[]) =>
    text === '' && placed.length === 0
      ? null
      : { index, delta: { content: text }, logprobs: chat.logprobs ? chatLogprobs(placed) : null, finish_reason: null }
  return {
    envelope,
    includeUsage: chat.includeUsage,
    promptTokens: started[0]!.promptTokens,
    opening: (index) => ({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }),
    token: (index, token) => content(index, token.text, chat.logprobs ? placers[index]!.push(token, token.text) : []),
    tail: (index, text, result) =>
      content(
        index,
        text,
        chat.logprobs ? placers[index]!.finish(result.generatedText, stoppedBySequence(result)) : [],
      ),
    finish: (index, result) => ({
      index,
      delta: {},
      logprobs: null,
      finish_reason: openAiFinishReason(result.finishReason),
    }),
  }
}
