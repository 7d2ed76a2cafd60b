import type {} from '@fastify/sse'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type {
  GenerationResult,
  GenerationService,
  StartedGeneration,
  TextToken,
} from '../../generation/generation-service.ts'
import type { RequestLimits } from '../../generation/generation-request.ts'
import { LoomError } from '../../errors/index.ts'
import { SseWriter, countOutcome, reportStreamCancelled, sendStreamError } from '../../http/index.ts'
import { compatDoc, generateDoc, generateStreamDoc } from '../../http/openapi/native-docs.ts'
import { abortOnDisconnect } from '../abort-on-disconnect.ts'
import { bearerToken } from '../bearer-token.ts'
import { compatStream, parseGenerateBody, type NativeGenerateRequest } from './parse-generate-body.ts'

export interface NativeRouteDeps {
  /** The generation service and limits, or null while the model is loading (requests get 503). */
  readonly state: () => { readonly generation: GenerationService; readonly limits: RequestLimits } | null
  readonly defaultSource: string
  readonly modelId: string
}

/**
 * LoRAX's `token` object; with `return_k_alternatives`, also the k most likely tokens at its step
 * (`alternative_tokens`, most likely first, each the token's own string), which LoRAX sends only
 * when asked.
 */
function tokenJson(token: TextToken) {
  const { id, text, logprob, special, skipped, top } = token
  if (top === undefined) return { id, text, logprob, special, skipped }
  return { id, text, logprob, special, alternative_tokens: top, skipped }
}

function seedJson(seed: bigint | null): number | null {
  return seed === null ? null : Number(seed)
}

function fullText(request: NativeGenerateRequest, result: GenerationResult): string {
  return request.returnFullText ? request.generation.prompt + result.generatedText : result.generatedText
}

/**
 * One header list item: characters outside printable ASCII percent-encoded as UTF-8 (an adapter
 * directory may be named `中文`, and Node refuses a raw one at send time), and `%` and `,` too,
 * so the value decodes unambiguously and an id holding a comma is not read as two merge inputs.
 */
function headerItem(value: string): string {
  return value.replace(/[^\x20-\x7e]|[%,]/gu, (c) => encodeURIComponent(c))
}

function setHeaders(reply: FastifyReply, deps: NativeRouteDeps, request: NativeGenerateRequest): void {
  reply.header('x-model-id', deps.modelId)
  const adapter = request.generation.adapter
  const merged = request.generation.mergedAdapters?.inputs
  // LoRAX names every adapter a response used: one id, or the merge inputs comma-joined.
  const used = adapter ? [adapter] : (merged ?? [])
  if (used.length > 0) {
    reply.header('x-adapter-id', used.map((a) => headerItem(a.id)).join(','))
    reply.header('x-adapter-source', [...new Set(used.map((a) => headerItem(a.source)))].join(','))
  }
}

/**
 * `POST /generate`, `POST /generate_stream` and `POST /` in LoRAX's request and response shapes.
 * `POST /` is LoRAX's (and TGI's) compatibility route, where the lorax-client posts everything: it
 * streams when the body says `stream: true` and otherwise answers `/generate`'s body in a
 * one-element array (the client reads `payload[0]`).
 */
export function nativeRoutes(deps: NativeRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    const serving = () => {
      const state = deps.state()
      if (!state) throw new LoomError('backend_not_ready')
      return state
    }
    const parse = (request: FastifyRequest, stream: boolean) =>
      parseGenerateBody(request.body, {
        stream,
        bearerToken: bearerToken(request),
        defaultSource: deps.defaultSource,
        limits: serving().limits,
      })

    /** One whole generation; resolves to `/generate`'s body once the headers are set. */
    async function generate(request: FastifyRequest, reply: FastifyReply): Promise<Record<string, unknown>> {
      const parsed = parse(request, false)
      const abort = abortOnDisconnect(reply)
      const started = await serving().generation.start(parsed.generation, abort.signal)
      const result = await finished(started)
      recordSuccess(reply, result)
      setHeaders(reply, deps, parsed)
      reply.header('x-prompt-tokens', String(result.promptTokens))
      reply.header('x-generated-tokens', String(result.generatedTokens))
      reply.header('x-skipped-tokens', String(result.skippedTokens))
      const body: Record<string, unknown> = { generated_text: fullText(parsed, result) }
      if (parsed.details) {
        body.details = {
          finish_reason: result.finishReason,
          prompt_tokens: result.promptTokens,
          generated_tokens: result.generatedTokens,
          skipped_tokens: result.skippedTokens,
          seed: seedJson(result.seed),
          prefill: parsed.decoderInputDetails ? result.prefill : [],
          tokens: result.tokens.map(tokenJson),
        }
      }
      return body
    }

    /** One generation as server-sent events; the route must be registered with `sse`. */
    async function generateStream(request: FastifyRequest, reply: FastifyReply): Promise<void> {
      const parsed = parse(request, true)
      const abort = abortOnDisconnect(reply)
      // Everything that can fail with a status code fails here, before the first byte is sent.
      const started = await serving().generation.start(parsed.generation, abort.signal)
      setHeaders(reply, deps, parsed)
      const out = new SseWriter(reply)
      try {
        let last: TextToken | null = null
        for await (const event of started.events) {
          if (event.type === 'token') {
            const sent =
              last === null ||
              (await out.send({ data: { token: tokenJson(last), generated_text: null, details: null } }))
            // Leaving the loop cancels the generation.
            if (!sent) return reportStreamCancelled(request)
            last = event.token
            continue
          }
          // The final event repeats the last token and carries the whole text (LoRAX's shape).
          const result = event.result
          const details = parsed.details
            ? {
                finish_reason: result.finishReason,
                prompt_tokens: result.promptTokens,
                generated_tokens: result.generatedTokens,
                seed: seedJson(result.seed),
              }
            : null
          if (!out.open) return reportStreamCancelled(request)
          recordSuccess(reply, result)
          // The result's last token: it carries the text held back to the end (a possible stop
          // prefix, an unfinished character), which the streamed copy does not.
          const token = result.tokens.at(-1) ??
            last ?? { id: -1, text: '', piece: '', logprob: 0, special: true, skipped: false }
          await out.send({ data: { token: tokenJson(token), generated_text: fullText(parsed, result), details } })
        }
      } catch (err) {
        // A generation cancelled because the client left is the client leaving, not a failure.
        if (!out.open) return reportStreamCancelled(request)
        await sendStreamError(request, reply, err)
      } finally {
        abort.abort()
      }
    }

    app.post('/generate', { config: { generation: true, openapi: generateDoc } }, generate)
    app.post(
      '/generate_stream',
      { sse: 'manual', config: { generation: true, openapi: generateStreamDoc } },
      generateStream,
    )
    app.post('/', { sse: 'manual', config: { generation: true, openapi: compatDoc } }, async (request, reply) => {
      if (compatStream(request.body)) return generateStream(request, reply)
      return [await generate(request, reply)]
    })
  }
}

/** Count a finished generation in `loom_request_*`. */
function recordSuccess(reply: FastifyReply, result: GenerationResult): void {
  countOutcome(reply.request, (metrics) =>
    metrics.requestSucceeded({
      durationS: reply.elapsedTime / 1000,
      ...result.timings,
      inputTokens: result.promptTokens,
      generatedTokens: result.generatedTokens,
      skippedTokens: result.skippedTokens,
      maxNewTokens: result.maxNewTokens,
    }),
  )
}

async function finished(started: StartedGeneration): Promise<GenerationResult> {
  for await (const event of started.events) {
    if (event.type === 'end') return event.result
  }
  throw new LoomError('generation_error', { detail: 'generation ended without a result' })
}
