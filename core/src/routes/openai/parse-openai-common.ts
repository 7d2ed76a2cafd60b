import { parseMergedAdapters } from '../../adapters/merge/parse-merged-adapters.ts'
import { fieldError } from '../../errors/index.ts'
import type { GenerationRequest, RequestLimits } from '../../generation/generation-request.ts'
import {
  expectObject,
  optionalBoolean,
  optionalNumber,
  optionalSeed,
  MAX_ADAPTER_ID_LENGTH,
  MAX_SOURCE_NAME_LENGTH,
  optionalCredential,
  optionalIdentifier,
  optionalStringList,
  type Body,
} from '../../validation/fields.ts'
import { checkIgnoredFields, IGNORED_FIELDS } from './parse-ignored-fields.ts'

/** What both v1 endpoints need to know about the server. */
export interface OpenAiParseContext {
  /** The served model id: `model` equal to it (or empty) selects the base model. */
  readonly modelId: string
  readonly defaultSource: string
  readonly bearerToken: string | undefined
  readonly limits: RequestLimits
}

/** Fields shared by `/v1/chat/completions` and `/v1/completions`, parsed once. */
export interface OpenAiCommon {
  /**
   * The `model` responses report: the served model id for the base model (`""` included, as OpenAI
   * always names a concrete model), else the adapter id as the client sent it.
   */
  readonly model: string
  readonly n: number
  readonly stream: boolean
  readonly includeUsage: boolean
  /** The field that limited the completion's length (`max_tokens`, `max_completion_tokens`), for errors. */
  readonly maxTokensField: string
  /** Whether that field was sent (else the endpoint's default applies). */
  readonly maxTokensSent: boolean
  readonly generation: Omit<GenerationRequest, 'prompt' | 'responseFormat' | 'topLogprobs' | 'prefillLogprobs'>
}

/** Fields both endpoints accept: OpenAI's shared sampling fields, Loom / LoRAX extensions, ignored ones. */
export const COMMON_FIELDS = [
  'model',
  'max_tokens',
  'temperature',
  'top_p',
  'n',
  'stop',
  'seed',
  'presence_penalty',
  'frequency_penalty',
  'logprobs',
  'stream',
  'stream_options',
  'logit_bias',
  // Loom / LoRAX extensions
  'adapter_source',
  'api_token',
  'top_k',
  'repetition_penalty',
  'ignore_eos_token',
  'merged_adapters',
  ...IGNORED_FIELDS,
]

/**
 * Parse the fields both endpoints share. OpenAI semantics: sampling at temperature 1 unless told
 * otherwise; `temperature: 0` is greedy; `stop` is a string or up to `max_stop_sequences` strings;
 * `model` names the base model (`""` or the served id) or an adapter on `adapter_source` (a Loom /
 * LoRAX extension field, defaulting to the server's default source). Without the length field the
 * completion gets `defaultMaxTokens` tokens (null: up to the context limit), as the endpoint documents.
 */
export function parseOpenAiCommon(
  body: Body,
  ctx: OpenAiParseContext,
  maxTokensField: string,
  defaultMaxTokens: number | null,
): OpenAiCommon {
  checkIgnoredFields(body)
  const model = optionalIdentifier(body, 'model', 'model', MAX_ADAPTER_ID_LENGTH)
  if (model === undefined) throw fieldError('model', 'is required (the model id, or an adapter id)', body.model)
  const adapterSource = optionalIdentifier(body, 'adapter_source', 'adapter_source', MAX_SOURCE_NAME_LENGTH, {
    nonEmpty: true,
  })
  const bodyToken = optionalCredential(body, 'api_token', 'api_token')
  // The header is usually the SDK's api key: used for an adapter only when it needs a token.
  const apiToken = bodyToken ?? ctx.bearerToken
  const adapter =
    model === '' || model === ctx.modelId ? null : { source: adapterSource ?? ctx.defaultSource, id: model }
  const mergedAdapters =
    body.merged_adapters === undefined || body.merged_adapters === null
      ? null
      : parseMergedAdapters(body.merged_adapters, 'merged_adapters', adapterSource ?? ctx.defaultSource)
  if (mergedAdapters !== null && adapter !== null) {
    throw fieldError(
      'merged_adapters',
      'cannot be combined with an adapter in `model`: set `model` to the base model id (or "") to use the merge',
      body.merged_adapters,
    )
  }

  const temperature = optionalNumber(body, 'temperature', 'temperature', { min: 0, max: 2 }) ?? 1
  const topP = optionalNumber(body, 'top_p', 'top_p', { above: 0, max: 1 }) ?? 1
  const topK = optionalNumber(body, 'top_k', 'top_k', { integer: true, min: 0 }) ?? 0
  const n = optionalNumber(body, 'n', 'n', { integer: true, min: 1, max: 16 }) ?? 1
  const maxTokens = optionalNumber(body, maxTokensField, maxTokensField, {
    integer: true,
    min: 1,
    max: ctx.limits.maxTotalTokens,
  })
  const stop =
    optionalStringList(body, 'stop', 'stop', { allowSingle: true, maxItems: ctx.limits.maxStopSequences }) ?? []
  if (stop.some((s) => s.length === 0)) throw fieldError('stop', 'must not contain empty strings', stop)
  const stream = optionalBoolean(body, 'stream', 'stream') ?? false
  const streamOptions =
    body.stream_options === undefined || body.stream_options === null
      ? undefined
      : expectObject(body.stream_options, 'stream_options')
  if (streamOptions && !stream)
    throw fieldError('stream_options', 'is only allowed when `stream` is true', streamOptions)
  const includeUsage = streamOptions
    ? (optionalBoolean(streamOptions, 'include_usage', 'stream_options.include_usage') ?? false)
    : false
  const logitBias = body.logit_bias
  if (logitBias !== undefined && logitBias !== null && Object.keys(expectObject(logitBias, 'logit_bias')).length > 0) {
    throw fieldError('logit_bias', 'is not supported by this server (send an empty object or omit it)', logitBias)
  }

  return {
    model: adapter === null ? ctx.modelId : model,
    n,
    stream,
    includeUsage,
    maxTokensField,
    maxTokensSent: maxTokens !== undefined,
    generation: {
      requestedModel: model,
      includeStopSequence: false,
      adapter,
      mergedAdapters,
      apiToken,
      apiTokenFromHeader: bodyToken === undefined && apiToken !== undefined,
      sampling: {
        temperature,
        topK: temperature === 0 ? 0 : topK,
        topP: temperature === 0 ? 1 : topP,
        typicalP: 1,
        repetitionPenalty: optionalNumber(body, 'repetition_penalty', 'repetition_penalty', { above: 0 }) ?? 1,
        frequencyPenalty: optionalNumber(body, 'frequency_penalty', 'frequency_penalty', { min: -2, max: 2 }) ?? 0,
        presencePenalty: optionalNumber(body, 'presence_penalty', 'presence_penalty', { min: -2, max: 2 }) ?? 0,
        seed: optionalSeed(body, 'seed', 'seed'),
      },
      maxNewTokens: maxTokens ?? defaultMaxTokens,
      stop,
      truncate: null,
      ignoreEos: optionalBoolean(body, 'ignore_eos_token', 'ignore_eos_token') ?? false,
    },
  }
}
