import type {} from '@fastify/sse'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { GenerationResult, StartedGeneration, TextToken } from '../../generation/generation-service.ts'
import { SseWriter, countOutcome, reportStreamCancelled, sendStreamError } from '../../http/index.ts'
import { usageOf } from './openai-shapes.ts'
import { mergeChoices } from './run-choices.ts'

/** Count a finished v1 request in `loom_request_*`. */
export function recordSuccess(reply: FastifyReply, promptTokens: number, results: readonly GenerationResult[]): void {
  countOutcome(reply.request, (metrics) => metrics.requestSucceeded(successTimings(reply, promptTokens, results)))
}

function successTimings(reply: FastifyReply, promptTokens: number, results: readonly GenerationResult[]) {
  // Phases from the slowest choice (the request lasts as long as it); tokens summed over choices.
  const slowest = results.reduce<GenerationResult | undefined>(
    (a, r) => (a === undefined || r.timings.inferenceS > a.timings.inferenceS ? r : a),
    undefined,
  )
  return {
    durationS: reply.elapsedTime / 1000,
    ...slowest?.timings,
    inputTokens: promptTokens,
    generatedTokens: results.reduce((sum, r) => sum + r.generatedTokens, 0),
    skippedTokens: results.reduce((sum, r) => sum + r.skippedTokens, 0),
    ...(slowest ? { maxNewTokens: slowest.maxNewTokens } : {}),
  }
}

/** How one endpoint shapes its stream; the framing (ids, usage, `[DONE]`, errors) is shared. */
export interface ChoiceStreamShape {
  /** Fields every chunk carries: `id`, `object`, `created`, `model`. */
  readonly envelope: Readonly<Record<string, unknown>>
  readonly includeUsage: boolean
  readonly promptTokens: number
  /** Choices to send before any token (chat: the role chunk; completions with echo: the prompt). */
  opening(index: number): unknown | null
  /** The choice for one token, or null to send nothing for it. */
  token(index: number, token: TextToken): unknown | null
  /**
   * The choice carrying `text`, the end of choice `index`'s output that no token event carried
   * (held back as a possible stop sequence or an unfinished character when generation ended), or
   * null to send nothing. Called once per choice, before `finish`.
   */
  tail(index: number, text: string, result: GenerationResult): unknown | null
  /** The choice that ends choice `index`. */
  finish(index: number, result: GenerationResult): unknown
}

/**
 * Stream `started` choices as OpenAI does: opening chunks, one chunk per token as tokens arrive
 * (choices interleaved), a finishing chunk per choice, an optional usage chunk with empty
 * `choices`, then `data: [DONE]`. With `include_usage`, every other chunk carries `usage: null`.
 * A failure after the first byte becomes an OpenAI-shaped error event.
 */
export async function streamChoices(
  request: FastifyRequest,
  reply: FastifyReply,
  started: readonly StartedGeneration[],
  shape: ChoiceStreamShape,
): Promise<void> {
  const out = new SseWriter(reply)
  const send = (choices: unknown[], usage: unknown = null) =>
    out.send({ data: { ...shape.envelope, choices, ...(shape.includeUsage ? { usage } : {}) } })
  try {
    for (let index = 0; index < started.length; index++) {
      const opening = shape.opening(index)
      if (opening !== null && !(await send([opening]))) return reportStreamCancelled(request)
    }
    const results: GenerationResult[] = []
    // Characters of each choice's output sent so far, to find the tail no token event carried.
    const sent = started.map(() => 0)
    // Leaving this loop early (the client left, a choice failed) cancels the choices still running.
    for await (const { index, value: event } of mergeChoices(started)) {
      if (event.type === 'token') {
        sent[index]! += event.token.text.length
        const choice = shape.token(index, event.token)
        if (choice !== null && !(await send([choice]))) return reportStreamCancelled(request)
      } else {
        results[index] = event.result
        const tail = shape.tail(index, event.result.generatedText.slice(sent[index]), event.result)
        if (tail !== null && !(await send([tail]))) return reportStreamCancelled(request)
        if (!(await send([shape.finish(index, event.result)]))) return reportStreamCancelled(request)
      }
    }
    if (!out.open) return reportStreamCancelled(request)
    recordSuccess(reply, shape.promptTokens, results)
    if (shape.includeUsage) await send([], usageOf(shape.promptTokens, results))
    await out.send('[DONE]')
  } catch (err) {
    // A choice that failed because the client left (its request was cancelled) is the client leaving.
    if (!out.open) return reportStreamCancelled(request)
    await sendStreamError(request, reply, err)
  }
}
