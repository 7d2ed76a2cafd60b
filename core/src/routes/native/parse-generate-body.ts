import { parseMergedAdapters } from '../../adapters/merge/parse-merged-adapters.ts'
import { fieldError } from '../../errors/index.ts'
import type { GenerationRequest, RequestLimits } from '../../generation/generation-request.ts'
import {
  expectObject,
  optionalBoolean,
  optionalNumber,
  optionalObject,
  optionalSeed,
  MAX_ADAPTER_ID_LENGTH,
  MAX_SOURCE_NAME_LENGTH,
  optionalCredential,
  optionalIdentifier,
  optionalStringList,
  rejectUnknownKeys,
  requiredString,
  type Body,
} from '../../validation/fields.ts'
import { parseResponseFormat } from '../parse-response-format.ts'

/** A validated `/generate`, `/generate_stream` or `POST /` body. */
export interface NativeGenerateRequest {
  readonly generation: GenerationRequest
  readonly details: boolean
  readonly decoderInputDetails: boolean
  readonly returnFullText: boolean
}

// `stream` picks the route's mode on `POST /` (see `compatStream`); elsewhere LoRAX ignores it.
const TOP_LEVEL = new Set(['inputs', 'parameters', 'stream'])
const PARAMETERS = new Set([
  'adapter_id',
  'adapter_source',
  'api_token',
  'merged_adapters',
  'best_of',
  'temperature',
  'repetition_penalty',
  'frequency_penalty',
  'presence_penalty',
  'top_k',
  'top_p',
  'typical_p',
  'do_sample',
  'max_new_tokens',
  'ignore_eos_token',
  'return_full_text',
  'stop',
  'truncate',
  'watermark',
  'details',
  'decoder_input_details',
  'return_k_alternatives',
  'seed',
  'response_format',
  'apply_chat_template',
])

/**
 * Parse a LoRAX-shaped body. Semantics follow LoRAX (../shared/research/lorax.md §1): sampling is on
 * when `do_sample` is set or any warper is active; otherwise decoding is greedy. `bearerToken` is the
 * `Authorization: Bearer` value; `api_token` in the body wins when both are sent (it is the more
 * specific of the two: it names the adapter's credential, the header may be a gateway's).
 */
export function parseGenerateBody(
  raw: unknown,
  options: { stream: boolean; bearerToken: string | undefined; defaultSource: string; limits: RequestLimits },
): NativeGenerateRequest {
  const body = expectObject(raw, 'body')
  rejectUnknownKeys(body, TOP_LEVEL, '')
  const inputs = requiredString(body, 'inputs', 'inputs')
  if (inputs.length === 0) throw fieldError('inputs', 'cannot be empty', inputs)
  const p: Body = optionalObject(body, 'parameters', 'parameters') ?? {}
  rejectUnknownKeys(p, PARAMETERS, 'parameters')
  const at = (key: string): string => `parameters.${key}`

  // Recognised LoRAX fields this server does not implement: accepted only at their neutral values,
  // so a client relying on them gets a clear 422 instead of silently different behaviour.
  // Accepted only at the value that means "off", so clients that always send them keep working.
  if (![undefined, null, 1].includes(p.best_of as number | null | undefined)) {
    throw fieldError(at('best_of'), 'is not supported by this server (only 1, the default)', p.best_of)
  }
  if (optionalBoolean(p, 'watermark', at('watermark')) === true) {
    throw fieldError(at('watermark'), 'is not supported (must be false or absent)', true)
  }

  const temperature = optionalNumber(p, 'temperature', at('temperature'), { min: 0, max: 100 })
  const topK = optionalNumber(p, 'top_k', at('top_k'), { integer: true, above: 0 })
  const topP = optionalNumber(p, 'top_p', at('top_p'), { above: 0, max: 1 })
  const typicalP = optionalNumber(p, 'typical_p', at('typical_p'), { above: 0, max: 1 })
  const doSample = optionalBoolean(p, 'do_sample', at('do_sample')) ?? false
  const repetitionPenalty = optionalNumber(p, 'repetition_penalty', at('repetition_penalty'), { above: 0 }) ?? 1
  const frequencyPenalty = optionalNumber(p, 'frequency_penalty', at('frequency_penalty'), { min: -2, max: 2 }) ?? 0
  const presencePenalty = optionalNumber(p, 'presence_penalty', at('presence_penalty'), { min: -2, max: 2 }) ?? 0

  const warped =
    (temperature !== undefined && temperature !== 1 && temperature !== 0) ||
    topK !== undefined ||
    (topP !== undefined && topP < 1) ||
    (typicalP !== undefined && typicalP < 1)
  const sampling = temperature !== 0 && (doSample || warped)

  const maxNewTokens = optionalNumber(p, 'max_new_tokens', at('max_new_tokens'), {
    integer: true,
    above: 0,
    max: options.limits.maxTotalTokens,
  })
  const stop =
    optionalStringList(p, 'stop', at('stop'), { allowSingle: true, maxItems: options.limits.maxStopSequences }) ?? []
  if (stop.some((s) => s.length === 0)) throw fieldError(at('stop'), 'must not contain empty strings', stop)
  const truncate = optionalNumber(p, 'truncate', at('truncate'), {
    integer: true,
    min: 1,
    max: options.limits.maxInputLength,
  })
  // LoRAX's alternatives are the k most likely tokens of the raw distribution, as OpenAI's
  // `top_logprobs` are: the same backend field, under the same bound. 0 (off) is accepted too,
  // as Loom always has, though LoRAX refuses it.
  const alternatives =
    optionalNumber(p, 'return_k_alternatives', at('return_k_alternatives'), {
      integer: true,
      min: 0,
      max: options.limits.maxTopLogprobs,
    }) ?? 0
  const decoderInputDetails = optionalBoolean(p, 'decoder_input_details', at('decoder_input_details')) ?? false
  if (decoderInputDetails && options.stream) {
    throw fieldError(at('decoder_input_details'), 'is not supported when streaming tokens', true)
  }

  const adapterId = optionalIdentifier(p, 'adapter_id', at('adapter_id'), MAX_ADAPTER_ID_LENGTH)
  const adapterSource = optionalIdentifier(p, 'adapter_source', at('adapter_source'), MAX_SOURCE_NAME_LENGTH, {
    nonEmpty: true,
  })
  const bodyToken = optionalCredential(p, 'api_token', at('api_token'))
  const apiToken = bodyToken ?? options.bearerToken
  const adapter =
    adapterId === undefined || adapterId === ''
      ? null
      : { source: adapterSource ?? options.defaultSource, id: adapterId }
  const mergedAdapters =
    p.merged_adapters === undefined || p.merged_adapters === null
      ? null
      : parseMergedAdapters(p.merged_adapters, at('merged_adapters'), adapterSource ?? options.defaultSource)
  if (mergedAdapters !== null && adapter !== null) {
    throw fieldError(
      at('merged_adapters'),
      'cannot be combined with `adapter_id`: send exactly one of them',
      p.merged_adapters,
    )
  }

  return {
    generation: {
      prompt: inputs,
      requestedModel: '',
      includeStopSequence: true,
      adapter,
      mergedAdapters,
      apiToken,
      apiTokenFromHeader: bodyToken === undefined && apiToken !== undefined,
      sampling: {
        temperature: sampling ? (temperature ?? 1) : 0,
        topK: sampling ? (topK ?? 0) : 0,
        topP: sampling ? (topP ?? 1) : 1,
        typicalP: sampling ? (typicalP ?? 1) : 1,
        repetitionPenalty,
        frequencyPenalty,
        presencePenalty,
        seed: optionalSeed(p, 'seed', at('seed')),
      },
      maxNewTokens: maxNewTokens ?? null,
      stop,
      truncate: truncate ?? null,
      ignoreEos: optionalBoolean(p, 'ignore_eos_token', at('ignore_eos_token')) ?? false,
      topLogprobs: alternatives,
      prefillLogprobs: decoderInputDetails,
      responseFormat: parseResponseFormat(p.response_format, at('response_format')),
    },
    details: optionalBoolean(p, 'details', at('details')) ?? false,
    decoderInputDetails,
    returnFullText: optionalBoolean(p, 'return_full_text', at('return_full_text')) ?? false,
  }
}

/**
 * Whether a `POST /` body asks for a stream: LoRAX's and TGI's compatibility route, where the
 * lorax-client sends everything, switches on `stream` (absent or null: false, their default).
 * A body that is not an object is refused here with the message the full parse would give.
 */
export function compatStream(raw: unknown): boolean {
  return optionalBoolean(expectObject(raw, 'body'), 'stream', 'stream') ?? false
}
