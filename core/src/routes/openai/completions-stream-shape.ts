import type { StartedGeneration } from '../../generation/generation-service.ts'
import { completionLogprobs, completionPiece, generatedLogprob, type CompletionLogprob } from './completion-logprobs.ts'
import { openAiFinishReason, stoppedBySequence } from './openai-shapes.ts'
import type { CompletionsRequest } from './parse-completions-body.ts'
import type { ChoiceStreamShape } from './stream-choices.ts'
import { TokenPlacer, type Placed } from './token-placer.ts'

/**
 * How a completions stream's chunks look: the prompt first when echoing, then a text delta per
 * token. With `logprobs`, each chunk lists the tokens settled by then (see `chatStreamShape`), with
 * offsets into the streamed text.
 */
export function completionsStreamShape(
  body: CompletionsRequest,
  started: readonly StartedGeneration[],
  envelope: Readonly<Record<string, unknown>>,
  promptTokens: number,
): ChoiceStreamShape {
  const placers = started.map(() => new TokenPlacer<CompletionLogprob>(completionPiece))
  const wantLogprobs = body.logprobs !== null
  // A text chunk, or null when it would carry nothing (no text, no settled token).
  const content = (index: number, text: string, placed: readonly Placed<CompletionLogprob>[]) =>
    text === '' && placed.length === 0
      ? null
      : { index, text, logprobs: wantLogprobs ? completionLogprobs(placed) : null, finish_reason: null }
  return {
    envelope,
    includeUsage: body.includeUsage,
    promptTokens,
    opening: (index) =>
      body.echo ? { index, text: started[index]!.promptText, logprobs: null, finish_reason: null } : null,
    token: (index, token) =>
      content(index, token.text, wantLogprobs ? placers[index]!.push(generatedLogprob(token), token.text) : []),
    tail: (index, text, result) =>
      content(index, text, wantLogprobs ? placers[index]!.finish(result.generatedText, stoppedBySequence(result)) : []),
    finish: (index, result) => ({
      index,
      text: '',
      logprobs: null,
      finish_reason: openAiFinishReason(result.finishReason),
    }),
  }
}
