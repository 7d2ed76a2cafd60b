import type {} from '@fastify/sse'
import type { FastifyInstance } from 'fastify'
import { abortOnDisconnect } from '../abort-on-disconnect.ts'
import { chatTokenLogprob, completionId, nowSeconds, openAiFinishReason, usageOf } from './openai-shapes.ts'
import { parseContext, servingState, type OpenAiRouteDeps } from './openai-route-deps.ts'
import { toOpenAiLengthError } from './openai-length-errors.ts'
import { parseChatBody } from './parse-chat-body.ts'
import { choiceRequests, finishChoices, startChoices } from './run-choices.ts'
import { recordSuccess, streamChoices } from './stream-choices.ts'

/** `POST /v1/chat/completions`: OpenAI's chat shapes, streaming and not, with `n` choices. */
export function chatRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    app.post('/v1/chat/completions', { sse: 'manual', config: { generation: true } }, async (request, reply) => {
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
              logprobs: chat.logprobs ? { content: result.tokens.map(chatTokenLogprob), refusal: null } : null,
              finish_reason: openAiFinishReason(result.finishReason),
            })),
            usage: usageOf(promptTokens, results),
          }
        }
        await streamChoices(request, reply, started, {
          envelope: { ...envelope, object: 'chat.completion.chunk' },
          includeUsage: chat.includeUsage,
          promptTokens,
          opening: (index) => ({
            index,
            delta: { role: 'assistant', content: '' },
            logprobs: null,
            finish_reason: null,
          }),
          token: (index, token) =>
            token.text === '' && !chat.logprobs
              ? null
              : {
                  index,
                  delta: { content: token.text },
                  logprobs: chat.logprobs ? { content: [chatTokenLogprob(token)], refusal: null } : null,
                  finish_reason: null,
                },
          tail: (index, text) =>
            text === '' ? null : { index, delta: { content: text }, logprobs: null, finish_reason: null },
          finish: (index, result) => ({
            index,
            delta: {},
            logprobs: null,
            finish_reason: openAiFinishReason(result.finishReason),
          }),
        })
      } finally {
        // Non-streamed responses are complete here too; aborting a finished request is a no-op.
        if (chat.stream) abort.abort()
      }
    })
  }
}
