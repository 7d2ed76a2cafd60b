import type {} from '@fastify/sse'
import type { FastifyInstance } from 'fastify'
import type { GenerationResult } from '../../generation/generation-service.ts'
import { sendStreamError } from '../../http/index.ts'
import { abortOnDisconnect } from '../abort-on-disconnect.ts'
import { chatTokenLogprob, completionId, nowSeconds, openAiFinishReason, usageOf } from './openai-shapes.ts'
import { parseContext, servingState, type OpenAiRouteDeps } from './openai-route-deps.ts'
import { parseChatBody } from './parse-chat-body.ts'
import { choiceRequests, finishChoices, mergeChoices, startChoices } from './run-choices.ts'

/** `POST /v1/chat/completions`: OpenAI's chat shapes, streaming and not, with `n` choices. */
export function chatRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    app.post('/v1/chat/completions', { sse: 'manual', config: { generation: true } }, async (request, reply) => {
      const chat = parseChatBody(request.body, parseContext(deps, request))
      const abort = abortOnDisconnect(reply)
      const started = await startChoices(
        servingState(deps).generation,
        choiceRequests([chat.generation], chat.n),
        abort.signal,
      )
      const promptTokens = started[0]!.promptTokens
      const id = completionId('chatcmpl')
      const created = nowSeconds()
      const record = (results: GenerationResult[]) =>
        reply.server.loomMetrics.requestSucceeded({
          durationS: reply.elapsedTime / 1000,
          inputTokens: promptTokens,
          generatedTokens: results.reduce((sum, r) => sum + r.generatedTokens, 0),
        })

      if (!chat.stream) {
        const results = await finishChoices(started)
        record(results)
        return {
          id,
          object: 'chat.completion',
          created,
          model: chat.model,
          choices: results.map((result, index) => ({
            index,
            message: { role: 'assistant', content: result.generatedText, refusal: null },
            logprobs: chat.logprobs ? { content: result.tokens.map(chatTokenLogprob), refusal: null } : null,
            finish_reason: openAiFinishReason(result.finishReason),
          })),
          usage: usageOf(promptTokens, results),
        }
      }

      const sse = reply.sse
      const chunk = (choices: unknown[], extra: object = {}) => ({
        data: {
          id,
          object: 'chat.completion.chunk',
          created,
          model: chat.model,
          choices,
          ...(chat.includeUsage ? { usage: null } : {}),
          ...extra,
        },
      })
      try {
        for (let index = 0; index < started.length; index++) {
          await sse.send(
            chunk([{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]),
          )
        }
        const results: GenerationResult[] = []
        for await (const { index, event } of mergeChoices(started)) {
          if (!sse.isConnected) break
          if (event.type === 'token') {
            if (event.token.text === '' && !chat.logprobs) continue
            const logprobs = chat.logprobs ? { content: [chatTokenLogprob(event.token)], refusal: null } : null
            await sse.send(chunk([{ index, delta: { content: event.token.text }, logprobs, finish_reason: null }]))
          } else {
            results[index] = event.result
            const finish = openAiFinishReason(event.result.finishReason)
            await sse.send(chunk([{ index, delta: {}, logprobs: null, finish_reason: finish }]))
          }
        }
        if (!sse.isConnected) return
        record(results)
        if (chat.includeUsage) await sse.send(chunk([], { usage: usageOf(promptTokens, results) }))
        await sse.send('[DONE]')
      } catch (err) {
        await sendStreamError(request, reply, err)
      } finally {
        abort.abort()
      }
    })
  }
}
