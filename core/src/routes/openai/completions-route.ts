import type {} from '@fastify/sse'
import type { FastifyInstance } from 'fastify'
import type {
  GenerationResult,
  PrefillToken,
  StartedGeneration,
  TextToken,
} from '../../generation/generation-service.ts'
import { abortOnDisconnect } from '../abort-on-disconnect.ts'
import { completionId, nowSeconds, openAiFinishReason, usageOf } from './openai-shapes.ts'
import { parseContext, servingState, type OpenAiRouteDeps } from './openai-route-deps.ts'
import { toOpenAiLengthError } from './openai-length-errors.ts'
import {
  COMPLETIONS_DEFAULT_MAX_TOKENS,
  parseCompletionsBody,
  type CompletionsRequest,
} from './parse-completions-body.ts'
import { choiceRequests, finishChoices, startChoices } from './run-choices.ts'
import { recordSuccess, streamChoices } from './stream-choices.ts'

/** The legacy completions `logprobs` object for a choice (prompt tokens first when echoing). */
function completionLogprobs(prefill: readonly PrefillToken[], tokens: readonly TextToken[], offset: number) {
  const entries = [
    ...prefill.map((p) => ({ piece: p.text, logprob: p.logprob, top: null as Record<string, number> | null })),
    ...tokens.map((t) => ({
      piece: t.piece,
      logprob: t.logprob as number | null,
      top: Object.fromEntries((t.top ?? []).map((alt) => [alt.text, alt.logprob])),
    })),
  ]
  const textOffset: number[] = []
  let at = offset
  for (const e of entries) {
    textOffset.push(at)
    at += e.piece.length
  }
  return {
    tokens: entries.map((e) => e.piece),
    token_logprobs: entries.map((e) => e.logprob),
    top_logprobs: entries.map((e) => e.top),
    text_offset: textOffset,
  }
}

function choiceText(request: CompletionsRequest, started: StartedGeneration, result: GenerationResult): string {
  return request.echo ? started.promptText + result.generatedText : result.generatedText
}

/** `POST /v1/completions`: plain prompts (no template), one or many, each with `n` choices. */
export function completionsRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    app.post('/v1/completions', { sse: 'manual', config: { generation: true } }, async (request, reply) => {
      const body = parseCompletionsBody(request.body, parseContext(deps, request))
      const abort = abortOnDisconnect(reply)
      // Choice index = prompt index × n + choice number, as OpenAI numbers them.
      const started = await startChoices(
        servingState(deps).generation,
        choiceRequests(body.generations, body.n),
        abort.signal,
        (err, index) =>
          toOpenAiLengthError(err, {
            maxTokens: body.maxTokensField,
            defaultMaxTokens: body.maxTokensSent ? null : COMPLETIONS_DEFAULT_MAX_TOKENS,
            prompt: body.promptFields[Math.floor(index / body.n)]!,
          }),
      )
      const promptTokens = started.filter((_, i) => i % body.n === 0).reduce((sum, s) => sum + s.promptTokens, 0)
      const envelope = { id: completionId('cmpl'), object: 'text_completion', created: nowSeconds(), model: body.model }

      if (!body.stream) {
        const results = await finishChoices(started)
        recordSuccess(reply, promptTokens, results)
        return {
          ...envelope,
          choices: results.map((result, index) => ({
            index,
            text: choiceText(body, started[index]!, result),
            logprobs:
              body.logprobs === null ? null : completionLogprobs(body.echo ? result.prefill : [], result.tokens, 0),
            finish_reason: openAiFinishReason(result.finishReason),
          })),
          usage: usageOf(promptTokens, results),
        }
      }
      try {
        await streamChoices(request, reply, started, {
          envelope,
          includeUsage: body.includeUsage,
          promptTokens,
          opening: (index) =>
            body.echo ? { index, text: started[index]!.promptText, logprobs: null, finish_reason: null } : null,
          token: (index, token) =>
            token.text === '' && body.logprobs === null
              ? null
              : {
                  index,
                  text: token.text,
                  logprobs: body.logprobs === null ? null : completionLogprobs([], [token], 0),
                  finish_reason: null,
                },
          tail: (index, text) => (text === '' ? null : { index, text, logprobs: null, finish_reason: null }),
          finish: (index, result) => ({
            index,
            text: '',
            logprobs: null,
            finish_reason: openAiFinishReason(result.finishReason),
          }),
        })
      } finally {
        abort.abort()
      }
    })
  }
}
