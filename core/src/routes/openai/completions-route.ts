import type {} from '@fastify/sse'
import type { FastifyInstance } from 'fastify'
import type {
  GenerationResult,
  PrefillToken,
  StartedGeneration,
  TextToken,
} from '../../generation/generation-service.ts'
import { sendStreamError } from '../../http/index.ts'
import { abortOnDisconnect } from '../abort-on-disconnect.ts'
import { completionId, nowSeconds, openAiFinishReason, usageOf } from './openai-shapes.ts'
import { parseContext, servingState, type OpenAiRouteDeps } from './openai-route-deps.ts'
import { parseCompletionsBody, type CompletionsRequest } from './parse-completions-body.ts'
import { choiceRequests, finishChoices, mergeChoices, startChoices } from './run-choices.ts'

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
      )
      const promptTokens = started.filter((_, i) => i % body.n === 0).reduce((sum, s) => sum + s.promptTokens, 0)
      const id = completionId('cmpl')
      const created = nowSeconds()
      const record = (results: GenerationResult[]) =>
        reply.server.loomMetrics.requestSucceeded({
          durationS: reply.elapsedTime / 1000,
          inputTokens: promptTokens,
          generatedTokens: results.reduce((sum, r) => sum + r.generatedTokens, 0),
        })

      if (!body.stream) {
        const results = await finishChoices(started)
        record(results)
        return {
          id,
          object: 'text_completion',
          created,
          model: body.model,
          choices: results.map((result, index) => {
            const s = started[index]!
            const logprobs =
              body.logprobs === null ? null : completionLogprobs(body.echo ? result.prefill : [], result.tokens, 0)
            return {
              index,
              text: choiceText(body, s, result),
              logprobs,
              finish_reason: openAiFinishReason(result.finishReason),
            }
          }),
          usage: usageOf(promptTokens, results),
        }
      }

      const sse = reply.sse
      const chunk = (choices: unknown[], extra: object = {}) => ({
        data: {
          id,
          object: 'text_completion',
          created,
          model: body.model,
          choices,
          ...(body.includeUsage ? { usage: null } : {}),
          ...extra,
        },
      })
      try {
        if (body.echo) {
          for (const [index, s] of started.entries()) {
            await sse.send(chunk([{ index, text: s.promptText, logprobs: null, finish_reason: null }]))
          }
        }
        const results: GenerationResult[] = []
        for await (const { index, event } of mergeChoices(started)) {
          if (!sse.isConnected) break
          if (event.type === 'token') {
            if (event.token.text === '' && body.logprobs === null) continue
            const logprobs = body.logprobs === null ? null : completionLogprobs([], [event.token], 0)
            await sse.send(chunk([{ index, text: event.token.text, logprobs, finish_reason: null }]))
          } else {
            results[index] = event.result
            const finish = openAiFinishReason(event.result.finishReason)
            await sse.send(chunk([{ index, text: '', logprobs: null, finish_reason: finish }]))
          }
        }
        if (!sse.isConnected) return
        record(results)
        if (body.includeUsage) await sse.send(chunk([], { usage: usageOf(promptTokens, results) }))
        await sse.send('[DONE]')
      } catch (err) {
        await sendStreamError(request, reply, err)
      } finally {
        abort.abort()
      }
    })
  }
}
