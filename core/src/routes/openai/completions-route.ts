import type {} from '@fastify/sse'
import type { FastifyInstance } from 'fastify'
import type { GenerationResult, StartedGeneration } from '../../generation/generation-service.ts'
import { completionsDoc } from '../../http/openapi/openai-docs.ts'
import { abortOnDisconnect } from '../abort-on-disconnect.ts'
import { choiceLogprobs } from './completion-logprobs.ts'
import { completionsStreamShape } from './completions-stream-shape.ts'
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

function choiceText(request: CompletionsRequest, started: StartedGeneration, result: GenerationResult): string {
  return request.echo ? started.promptText + result.generatedText : result.generatedText
}

/** `POST /v1/completions`: plain prompts (no template), one or many, each with `n` choices. */
export function completionsRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    const config = { generation: true, openapi: completionsDoc }
    app.post('/v1/completions', { sse: 'manual', config }, async (request, reply) => {
      const body = parseCompletionsBody(request.body, parseContext(deps, request))
      const abort = abortOnDisconnect(reply)
      try {
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
        const envelope = {
          id: completionId('cmpl'),
          object: 'text_completion',
          created: nowSeconds(),
          model: body.model,
        }

        if (!body.stream) {
          const results = await finishChoices(started)
          recordSuccess(reply, promptTokens, results)
          return {
            ...envelope,
            choices: results.map((result, index) => {
              const text = choiceText(body, started[index]!, result)
              return {
                index,
                text,
                logprobs: body.logprobs === null ? null : choiceLogprobs(text, result, body.echo),
                finish_reason: openAiFinishReason(result.finishReason),
              }
            }),
            usage: usageOf(promptTokens, results),
          }
        }
        await streamChoices(request, reply, started, completionsStreamShape(body, started, envelope, promptTokens))
      } finally {
        // However the request ended (answered, failed, its client gone), no choice runs on for
        // nobody; for choices that finished, aborting is a no-op.
        abort.abort()
      }
    })
  }
}
