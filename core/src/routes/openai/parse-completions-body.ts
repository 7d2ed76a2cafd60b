import { fieldError } from '../../errors/index.ts'
import type { GenerationRequest } from '../../generation/generation-request.ts'
import { optionalBoolean, optionalNumber, rejectUnknownKeys } from '../../validation/fields.ts'
import { openAiBody } from './openai-body.ts'
import { COMMON_FIELDS, parseOpenAiCommon, type OpenAiCommon, type OpenAiParseContext } from './parse-openai-common.ts'

/** OpenAI's documented default `max_tokens` for `/v1/completions` (chat has none). */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16

const COMPLETION_FIELDS = new Set([...COMMON_FIELDS, 'prompt', 'echo', 'suffix', 'best_of'])

export interface CompletionsRequest extends OpenAiCommon {
  readonly prompts: readonly string[]
  /** The field naming each prompt in errors: `prompt`, or `prompt[i]` when a list was sent. */
  readonly promptFields: readonly string[]
  readonly echo: boolean
  /** Number of alternatives per token to report, or null when `logprobs` was not asked for. */
  readonly logprobs: number | null
  /** One generation request per prompt (each run `n` times). */
  readonly generations: readonly GenerationRequest[]
}

/** Parse a `/v1/completions` body: `prompt` is a string or an array of strings; no template is applied. */
export function parseCompletionsBody(raw: unknown, ctx: OpenAiParseContext): CompletionsRequest {
  const body = openAiBody(raw)
  if (body.response_format !== undefined && body.response_format !== null) {
    throw fieldError(
      'response_format',
      'is supported on /v1/chat/completions only; use that endpoint for JSON output',
      body.response_format,
    )
  }
  rejectUnknownKeys(body, COMPLETION_FIELDS, '')
  if (body.suffix !== undefined) throw fieldError('suffix', 'is not supported by this server', body.suffix)
  if (![undefined, null, 1].includes(body.best_of as number | null | undefined)) {
    throw fieldError('best_of', 'is not supported by this server (only 1, the default)', body.best_of)
  }
  const prompt = body.prompt
  const prompts = typeof prompt === 'string' ? [prompt] : prompt
  if (!Array.isArray(prompts) || prompts.length === 0 || prompts.some((p) => typeof p !== 'string')) {
    throw fieldError('prompt', 'must be a string or a non-empty array of strings', prompt)
  }
  const promptFields = prompts.map((_, i) => (Array.isArray(prompt) ? `prompt[${i}]` : 'prompt'))
  prompts.forEach((p, i) => {
    if ((p as string).length === 0) throw fieldError(promptFields[i]!, 'must not be empty', p)
  })
  const common = parseOpenAiCommon(body, ctx, 'max_tokens', COMPLETIONS_DEFAULT_MAX_TOKENS)
  const sequences = prompts.length * common.n
  if (ctx.limits.maxSequences !== undefined && sequences > ctx.limits.maxSequences) {
    // Never admissible, so not a (retryable) 429 `overloaded`.
    const limit = `${ctx.limits.maxSequences} (max_concurrent_requests: each choice of each prompt is one sequence)`
    if (common.n > 1) throw fieldError('n', `times the ${prompts.length} prompts must be <= ${limit}`, common.n)
    throw fieldError('prompt', `must hold at most ${limit} prompts`, prompts.length)
  }
  const echo = optionalBoolean(body, 'echo', 'echo') ?? false
  const logprobs = optionalNumber(body, 'logprobs', 'logprobs', { integer: true, min: 0, max: 5 }) ?? null
  if (echo && logprobs !== null && common.stream) {
    throw fieldError('echo', 'with `logprobs` is not supported when streaming', true)
  }
  return {
    ...common,
    prompts: prompts as string[],
    promptFields,
    echo,
    logprobs,
    generations: (prompts as string[]).map((text) => ({
      ...common.generation,
      prompt: text,
      responseFormat: null,
      topLogprobs: logprobs ?? 0,
      prefillLogprobs: echo && logprobs !== null,
    })),
  }
}
