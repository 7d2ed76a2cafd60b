import { randomBytes } from 'node:crypto'
import type { AdapterHandle } from '../contracts/adapter.ts'
import type { Backend, BackendRequest, GeneratedToken, GenerationEvent as BackendEvent } from '../contracts/backend.ts'
import type { TokenConstraintFactory } from '../contracts/grammar.ts'
import type { Tokenizer } from '../contracts/tokenizer.ts'
import type { AdapterManager } from '../adapters/adapter-manager.ts'
import { LoomError, fieldError } from '../errors/index.ts'
import type { GenerationRequest, RequestLimits } from './generation-request.ts'
import { StopSequenceMatcher } from './stop-sequences.ts'

/** Why generation ended, in the native API's words. */
export type FinishReason = 'length' | 'eos_token' | 'stop_sequence'

/** A generated token with the text it added to the output (possibly empty while a character is incomplete). */
export interface TextToken {
  readonly id: number
  readonly text: string
  readonly logprob: number
  readonly special: boolean
  readonly skipped: boolean
  readonly top?: readonly { id: number; text: string; logprob: number }[]
}

export interface PrefillToken {
  readonly id: number
  readonly text: string
  readonly logprob: number | null
}

/** The summary of a finished generation. */
export interface GenerationResult {
  readonly generatedText: string
  readonly finishReason: FinishReason
  readonly promptTokens: number
  readonly generatedTokens: number
  readonly skippedTokens: number
  /** The seed used when sampling; null for greedy decoding. */
  readonly seed: bigint | null
  readonly prefill: readonly PrefillToken[]
  readonly tokens: readonly TextToken[]
}

export type GenerationEvent = { type: 'token'; token: TextToken } | { type: 'end'; result: GenerationResult }

/** A generation that passed every check and has been handed to the backend. */
export interface StartedGeneration {
  readonly promptTokens: number
  readonly adapter: AdapterHandle | null
  /** Events in order; the last is always `end`. Breaking out cancels the backend request. */
  readonly events: AsyncIterable<GenerationEvent>
}

export interface GenerationServiceDeps {
  readonly backend: Backend
  readonly tokenizer: Tokenizer
  readonly adapters: AdapterManager
  readonly limits: RequestLimits
  /** End-of-sequence ids from `generation_config.json`. */
  readonly eosTokenIds: readonly number[]
  readonly constraints: TokenConstraintFactory | null
}

let nextRequestId = 0

/**
 * Turns a validated text request into a backend request and the backend's token events into text:
 * prompt tokenization and limits, adapter authorization and loading (started together, so a slow
 * check overlaps tokenization), incremental detokenization, and stop sequences.
 */
export class GenerationService {
  readonly #deps: GenerationServiceDeps

  constructor(deps: GenerationServiceDeps) {
    this.#deps = deps
  }

  async start(request: GenerationRequest, signal: AbortSignal): Promise<StartedGeneration> {
    const { backend, tokenizer, adapters, limits } = this.#deps
    // Authorization and adapter loading start first and run while the prompt is tokenized.
    const ref = request.adapter
    const authorized = ref ? adapters.authorize(ref, request.apiToken) : Promise.resolve()
    const loaded = ref ? authorized.then(() => adapters.acquire(ref, request.apiToken, signal)) : Promise.resolve(null)
    // Both promises are awaited below; mark them handled so an early validation error doesn't leave a rejection unobserved.
    loaded.catch(() => undefined)

    let inputIds = tokenizer.encode(request.prompt, { addSpecialTokens: request.addSpecialTokens })
    if (request.truncate !== null && inputIds.length > request.truncate) inputIds = inputIds.slice(-request.truncate)
    if (inputIds.length === 0) throw fieldError('inputs', 'must encode to at least one token', request.prompt)
    if (inputIds.length > limits.maxInputLength) {
      throw fieldError(
        'inputs',
        `must have at most ${limits.maxInputLength} tokens (set \`truncate\` to keep the last tokens)`,
        `${inputIds.length} tokens`,
      )
    }
    const room = limits.maxTotalTokens - inputIds.length
    const maxNewTokens = request.maxNewTokens ?? room
    if (maxNewTokens > room) {
      throw fieldError(
        'max_new_tokens',
        `plus the ${inputIds.length} input tokens must be <= ${limits.maxTotalTokens}`,
        maxNewTokens,
      )
    }
    if (maxNewTokens < 1) {
      throw fieldError(
        'inputs',
        `leave room for at least one new token (limit ${limits.maxTotalTokens})`,
        inputIds.length,
      )
    }

    const constraint =
      request.responseFormat === null
        ? null
        : this.#deps.constraints
          ? await this.#deps.constraints.create(request.responseFormat)
          : (() => {
              throw new LoomError('grammar_unsupported', { detail: 'this server has no structured-output engine' })
            })()

    await authorized
    const adapter = await loaded
    const sampled = request.sampling.temperature > 0
    const seed = request.sampling.seed ?? randomBytes(8).readBigUInt64LE()
    const backendRequest: BackendRequest = {
      id: `req-${++nextRequestId}`,
      inputIds,
      maxNewTokens,
      sampling: { ...request.sampling, seed },
      eosTokenIds: request.ignoreEos ? [] : this.#deps.eosTokenIds,
      adapter,
      speculator: null,
      constraint,
      topLogprobs: request.topLogprobs,
      prefillLogprobs: request.prefillLogprobs,
      signal,
    }
    const stream = backend.submit(backendRequest)
    return {
      promptTokens: inputIds.length,
      adapter,
      events: this.#textEvents(stream, request, inputIds, sampled ? seed : null),
    }
  }

  async *#textEvents(
    stream: AsyncIterable<BackendEvent>,
    request: GenerationRequest,
    inputIds: readonly number[],
    seed: bigint | null,
  ): AsyncGenerator<GenerationEvent> {
    const { tokenizer } = this.#deps
    const decoder = tokenizer.createDecoder({ skipSpecialTokens: true })
    const stops = new StopSequenceMatcher(request.stop)
    const tokens: TextToken[] = []
    let prefill: PrefillToken[] = []
    let text = ''
    let skipped = 0
    let finish: FinishReason | null = null

    for await (const event of stream) {
      if (event.type === 'prefill') {
        prefill = event.tokens.map((t, i) => ({
          id: t.id,
          text: tokenizer.decode([inputIds[i] ?? t.id], { skipSpecialTokens: false }),
          logprob: t.logprob,
        }))
      } else if (event.type === 'tokens') {
        for (const generated of event.tokens) {
          const token = this.#textToken(generated, decoder.push(generated.id))
          tokens.push(token)
          if (generated.skipped) skipped++
          const cut = stops.push(token.text)
          if (cut >= 0) {
            // The stop sequence ends inside this token's text: keep the text up to its end.
            const keep = cut - text.length
            const trimmed = { ...token, text: token.text.slice(0, keep) }
            tokens[tokens.length - 1] = trimmed
            text += trimmed.text
            finish = 'stop_sequence'
            yield { type: 'token', token: trimmed }
            break
          }
          text += token.text
          yield { type: 'token', token }
        }
        if (finish) break
      } else {
        if (event.reason === 'cancelled')
          throw new LoomError('generation_error', { detail: 'the request was cancelled' })
        finish = event.reason
        const rest = decoder.flush()
        if (rest.length > 0) {
          text += rest
          const last = tokens[tokens.length - 1]
          if (last) tokens[tokens.length - 1] = { ...last, text: last.text + rest }
        }
      }
    }
    if (finish === null) throw new LoomError('generation_error', { detail: 'the backend ended without a finish event' })
    yield {
      type: 'end',
      result: {
        generatedText: text,
        finishReason: finish,
        promptTokens: inputIds.length,
        generatedTokens: tokens.length,
        skippedTokens: skipped,
        seed,
        prefill,
        tokens,
      },
    }
  }

  #textToken(generated: GeneratedToken, text: string): TextToken {
    const { tokenizer } = this.#deps
    const token: TextToken = {
      id: generated.id,
      text,
      logprob: generated.logprob,
      special: tokenizer.isSpecial(generated.id),
      skipped: generated.skipped,
    }
    if (!generated.top) return token
    return {
      ...token,
      top: generated.top.map((alt) => ({
        id: alt.id,
        text: tokenizer.decode([alt.id], { skipSpecialTokens: false }),
        logprob: alt.logprob,
      })),
    }
  }
}
