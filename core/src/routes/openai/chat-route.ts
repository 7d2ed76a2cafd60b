import type {} from '@fastify/sse'
import type { FastifyInstance } from 'fastify'
import { chatCompletionsDoc } from '../../http/openapi/openai-docs.ts'
import { abortOnDisconnect } from '../abort-on-disconnect.ts'
import { chatStreamShape } from './chat-stream-shape.ts'
import { chatLogprobs, completionId, nowSeconds, openAiFinishReason, placedTokens, usageOf } from './openai-shapes.ts'
import { parseContext, servingState, type OpenAiRouteDeps } from './openai-route-deps.ts'
import { toOpenAiLengthError } from './openai-length-errors.ts'
import { parseChatBody } from './parse-chat-body.ts'
import { choiceRequests, finishChoices, startChoices } from './run-choices.ts'
import { recordSuccess, streamChoices } from './stream-choices.ts'

/** `POST /v1/chat/completions`: OpenAI's chat shapes, streaming and not, with `n` choices. */
export function chatRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    const config = { generation: true, openapi: chatCompletionsDoc }
    app.post('/v1/chat/completions', { sse: 'manual', config }, async (request, reply) => {
      const chat = parseChatBody(request.body, parseContext(deps, request))
      const abort = abortOnDisconnect(reply)
      try {
        const started = await startChoices(
          servingState(deps).generation,
          choiceRequests([chat.generation], chat.n),
          abort.signal,
          (err) =>
            toOpenAiLengthError(err, { maxTokens: chat.maxTokensField, defaultMaxTokens: null, prompt: 'messages' }),
        )
        const promptTokens = started[0]!.promptTokens
        const envelope = {
          id: completionId('chatcmpl'),
          object: 'chat.completion',
          created: nowSeconds(),
          model: chat.model,
        }

        if (!chat.stream) {
          const results = await finishChoices(started)
          recordSuccess(reply, promptTokens, results)
          return {
            ...envelope,
            choices: results.map((result, index) => ({
              index,
              message: { role: 'assistant', content: result.generatedText, refusal: null },
              logprobs: chat.logprobs ? chatLogprobs(placedTokens(result)) : null,
              finish_reason: openAiFinishReason(result.finishReason),
            })),
            usage: usageOf(promptTokens, results),
          }
        }
        await streamChoices(
          request,
          reply,
          started,
          chatStreamShape(chat, started, { ...envelope, object: 'chat.completion.chunk' }),
        )
      } finally {
        // However the request ended (answered, failed, its client gone), no choice runs on for
        // nobody; for choices that finished, aborting is a no-op.
        abort.abort()
      }
    })
  }
}
