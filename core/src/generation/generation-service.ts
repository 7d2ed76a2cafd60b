import { randomBytes } from 'node:crypto'
import type { AdapterHandle } from '../contracts/adapter.ts'
import type { Backend, BackendRequest, GeneratedToken, GenerationEvent as BackendEvent } from '../contracts/backend.ts'
import type { ResponseFormat, TokenConstraintFactory } from '../contracts/grammar.ts'
import type { Tokenizer } from '../contracts/tokenizer.ts'
import type { AdapterManager } from '../adapters/adapter-manager.ts'
import { LoomError, fieldError } from '../errors/index.ts'
import { resolveSpeculator } from '../engine/medusa/speculator-rules.ts'
import type { ChatTemplates } from '../templates/chat-templates.ts'
import type { GenerationRequest, RequestLimits } from './generation-request.ts'
import { StopSequenceMatcher } from './stop-sequences.ts'

/** Why generation ended, in the native API's words. */
export type FinishReason = 'length' | 'eos_token' | 'stop_sequence'

/** A generated token with the text it added to the output (possibly empty while text is held back). */
export interface TextToken {
  readonly id: number
  /** What this token added to the output text (stream deltas concatenate to the whole text). */
  readonly text: string
  /** The token's own string (`decode([id])`), as logprob listings show it. */
  readonly piece: string
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
  /** The request's cap on new tokens (asked for, or what the context left). */
  readonly maxNewTokens: number
  /** Where the time went, for `loom_request_*_duration`. */
  readonly timings: GenerationTimings
}

/** Seconds spent in each phase of a generation. */
export interface GenerationTimings {
  /** From `start` to the hand-over to the backend: authorization, adapter loading, templating, tokenizing. */
  readonly validationS: number
  /** Waiting in the backend's queue before the first step that included the request. */
  readonly queueS: number
  /** From the first step to the last token. */
  readonly inferenceS: number
}

export type GenerationEvent = { type: 'token'; token: TextToken } | { type: 'end'; result: GenerationResult }

/** A generation that passed every check and has been handed to the backend. */
export interface StartedGeneration {
  /** The prompt as the model sees it (chat messages rendered by the template). */
  readonly promptText: string
  readonly promptTokens: number
  readonly adapter: AdapterHandle | null
  /** Events in order; the last is always `end`. Breaking out cancels the backend request. */
  readonly events: AsyncIterable<GenerationEvent>
}

export interface GenerationServiceDeps {
  readonly backend: Backend
  readonly tokenizer: Tokenizer
  readonly adapters: AdapterManager
  readonly templates: ChatTemplates
  readonly limits: RequestLimits
  /** End-of-sequence ids from `generation_config.json`. */
  readonly eosTokenIds: readonly number[]
  readonly constraints: TokenConstraintFactory | null
  /** Medusa heads every request speculates with (`speculation.medusa_adapter`), or null. */
  readonly defaultSpeculator: AdapterHandle | null
}

let nextRequestId = 0

/**
 * Turns a validated text request into a backend request and the backend's token events into text:
 * adapter authorization and loading (started first, so a slow check overlaps tokenization), chat
 * templates, prompt limits, incremental detokenization, and stop sequences.
 */
export class GenerationService {
  readonly #deps: GenerationServiceDeps

  constructor(deps: GenerationServiceDeps) {
    this.#deps = deps
  }

  async start(request: GenerationRequest, signal: AbortSignal): Promise<StartedGeneration> {
    const startedAt = performance.now()
    const { backend, adapters, limits, templates } = this.#deps
    // Authorization starts first and runs while the prompt is templated and tokenized.
    const ref = request.adapter
    const merge = request.mergedAdapters ?? null
    // A merged adapter is authorized input by input, on every request (its cache key holds no token).
    const auth = { fromHeader: request.apiTokenFromHeader === true }
    // Resolves with the token to fetch with (none when a header token was not needed).
    const authorized: Promise<string | undefined> = merge
      ? Promise.all(merge.inputs.map((input) => adapters.authorize(input, request.apiToken, auth))).then((tokens) =>
          tokens.find((token) => token !== undefined),
        )
      : ref
        ? adapters.authorize(ref, request.apiToken, auth)
        : Promise.resolve(undefined)
    const loaded = merge
      ? authorized.then((token) => adapters.acquireMerged(merge, token, signal))
      : ref
        ? authorized.then((token) => adapters.acquire(ref, token, signal))
        : Promise.resolve(null)
    // Awaited below; mark handled so an early validation error leaves no unobserved rejection.
    loaded.catch(() => undefined)

    let promptText: string
    let addSpecialTokens: boolean
    if (typeof request.prompt === 'string') {
      promptText = request.prompt
      addSpecialTokens = true
    } else {
      // The adapter may ship its own template: it is known only once the adapter is fetched.
      const acquired = ref === null ? null : await loaded
      promptText = await templates.render(request.prompt, acquired?.dir ?? null, request.requestedModel)
      addSpecialTokens = false
    }
    const inputIds = this.#promptIds(promptText, addSpecialTokens, request)
    const room = limits.maxTotalTokens - inputIds.length
    const maxNewTokens = request.maxNewTokens ?? room
    if (maxNewTokens > room) {
      throw fieldError(
        'parameters.max_new_tokens',
        `plus the ${inputIds.length} prompt tokens must be <= ${limits.maxTotalTokens}`,
        maxNewTokens,
      )
    }
    if (maxNewTokens < 1) {
      throw fieldError('inputs', `must leave room for one new token (limit ${limits.maxTotalTokens})`, inputIds.length)
    }
    const grammar = request.responseFormat
    if (grammar !== null) await this.#checkGrammar(grammar)

    await authorized
    const acquired = await loaded
    const acquiredHandle = acquired?.handle ?? null
    // An `adapter_id` naming Medusa heads replaces the default heads; the request then runs the base model.
    const medusa = acquiredHandle?.kind === 'medusa' ? acquiredHandle : null
    const adapter = medusa === null ? acquiredHandle : null
    const sampled = request.sampling.temperature > 0
    // Sampling under an output constraint does not speculate: with both, a seeded request's
    // text depended on the tree sizes the adaptive policy picked (timing), so it was neither
    // reproducible nor the text of a server without Medusa. Greedy constrained rows keep it.
    // A LoRA with its own heads (Medusa+LoRA) speculates with them: heads trained on the base
    // model mispredict for it.
    const heads = acquired?.heads ?? resolveSpeculator(medusa, this.#deps.defaultSpeculator, ref?.id)
    const speculator = grammar !== null && sampled ? null : heads
    // Drawn below 2^53: `details.seed` is a JSON number, and a client must be able to send it back.
    const seed = request.sampling.seed ?? randomBytes(8).readBigUInt64LE() % BigInt(Number.MAX_SAFE_INTEGER + 1)
    const backendRequest: BackendRequest = {
      id: `req-${++nextRequestId}`,
      inputIds,
      maxNewTokens,
      sampling: { ...request.sampling, seed },
      eosTokenIds: request.ignoreEos ? [] : this.#deps.eosTokenIds,
      adapter,
      speculator,
      grammar,
      topLogprobs: request.topLogprobs,
      prefillLogprobs: request.prefillLogprobs,
      signal,
    }
    const submittedAt = performance.now()
    const stream = backend.submit(backendRequest)
    return {
      promptText,
      promptTokens: inputIds.length,
      adapter,
      events: this.#textEvents(stream, request, inputIds, sampled ? seed : null, {
        maxNewTokens,
        validationS: (submittedAt - startedAt) / 1000,
        submittedAt,
      }),
    }
  }

  #promptIds(text: string, addSpecialTokens: boolean, request: GenerationRequest): number[] {
    const { tokenizer, limits } = this.#deps
    // Tokenizing runs on the event loop (~1.5 s for 1 MB): a text longer than the limit's worth
    // of the longest token cannot fit, so refuse it without tokenizing.
    const longest = this.#longestTokenChars()
    if (request.truncate === null && text.length > (limits.maxInputLength + 2) * longest) {
      const atLeast = Math.ceil(text.length / longest)
      throw new LoomError(
        'validation_error',
        {
          field: 'inputs',
          expected: `must be at most ${limits.maxInputLength} tokens long (set \`parameters.truncate\` to keep the last tokens)`,
          received: `at least ${atLeast} (${text.length} characters)`,
        },
        { param: 'inputs' },
      )
    }
    let ids = tokenizer.encode(text, { addSpecialTokens })
    if (request.truncate !== null && ids.length > request.truncate) ids = ids.slice(-request.truncate)
    if (ids.length === 0) throw fieldError('inputs', 'must encode to at least one token', text)
    if (ids.length > limits.maxInputLength) {
      throw fieldError(
        'inputs',
        `must be at most ${limits.maxInputLength} tokens long (set \`parameters.truncate\` to keep the last tokens)`,
        ids.length,
      )
    }
    return ids
  }

  #longestToken: number | null = null

  /** Characters in the vocabulary's longest token (decoded with its special tokens), computed once. */
  #longestTokenChars(): number {
    if (this.#longestToken === null) {
      const { tokenizer } = this.#deps
      let longest = 1
      for (let id = 0; id < tokenizer.vocabSize; id++) {
        longest = Math.max(longest, tokenizer.decode([id], { skipSpecialTokens: false }).length)
      }
      this.#longestToken = longest
    }
    return this.#longestToken
  }

  /**
   * Refuse a grammar that does not compile before the request is submitted (a 422 before the
   * first byte); the compiled grammar stays cached for the backend. A backend without structured
   * output refuses the request itself, saying what would enable it.
   */
  async #checkGrammar(grammar: ResponseFormat): Promise<void> {
    if (!this.#deps.backend.capabilities().structuredOutput) return
    if (!this.#deps.constraints) {
      throw new LoomError('grammar_unsupported', { detail: 'this server has no structured-output engine' })
    }
    await this.#deps.constraints.check(grammar)
  }

  async *#textEvents(
    stream: AsyncIterable<BackendEvent>,
    request: GenerationRequest,
    inputIds: readonly number[],
    seed: bigint | null,
    submitted: { maxNewTokens: number; validationS: number; submittedAt: number },
  ): AsyncGenerator<GenerationEvent> {
    const { tokenizer } = this.#deps
    const decoder = tokenizer.createDecoder({ skipSpecialTokens: true })
    const stops = new StopSequenceMatcher(request.stop, request.includeStopSequence)
    const tokens: TextToken[] = []
    let prefill: PrefillToken[] = []
    let text = ''
    let skipped = 0
    let finish: FinishReason | null = null
    let queueS = 0

    for await (const event of stream) {
      if (event.type === 'prefill') {
        prefill = event.tokens.map((t, i) => ({
          id: t.id,
          text: tokenizer.decode([inputIds[i] ?? t.id], { skipSpecialTokens: false }),
          logprob: t.logprob,
        }))
      } else if (event.type === 'tokens') {
        for (const generated of event.tokens) {
          const { emit, stopped } = stops.push(decoder.push(generated.id))
          const token = this.#textToken(generated, emit)
          tokens.push(token)
          if (generated.skipped) skipped++
          text += emit
          yield { type: 'token', token }
          if (stopped) {
            finish = 'stop_sequence'
            break
          }
        }
        // Leaving the loop cancels the backend request (its KV blocks are freed at once).
        if (finish) break
      } else {
        if (event.reason === 'cancelled') throw new LoomError('request_cancelled')
        finish = event.reason
        queueS = event.queueMs / 1000
        // Text held back (an incomplete character, a possible stop prefix) belongs to the last token.
        const rest = stops.push(decoder.flush()).emit + stops.flush()
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
        maxNewTokens: submitted.maxNewTokens,
        timings: {
          validationS: submitted.validationS,
          queueS,
          inferenceS: Math.max(0, (performance.now() - submitted.submittedAt) / 1000 - queueS),
        },
      },
    }
  }

  #textToken(generated: GeneratedToken, text: string): TextToken {
    const { tokenizer } = this.#deps
    const token: TextToken = {
      id: generated.id,
      text,
      piece: tokenizer.decode([generated.id], { skipSpecialTokens: false }),
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
