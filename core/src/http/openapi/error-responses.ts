import { LoomError, type ErrorParams } from '../../errors/loom-error.ts'
import { ERRORS, type ErrorCode } from '../../errors/registry.ts'
import type { ApiFamily } from '../api-family.ts'
import { toNativeError } from '../map-native.ts'
import { toOpenAiError } from '../map-openai.ts'
import { ref, type JsonSchema } from './json-schema.ts'
import { jsonContent, response } from './media.ts'

/**
 * The error responses of a route, from the error registry: one response per HTTP status, listing
 * the codes that answer with it, with an example of each written by the family's real mapper
 * (`toNativeError`, `toOpenAiError`), so the documented bodies cannot drift from the served ones.
 */

/** Every route: the server drains (`server_closing`) or fails unexpectedly (`internal_error`). */
export const ANY_ROUTE_ERRORS: readonly ErrorCode[] = ['server_closing', 'internal_error']

/** Routes that read a JSON body: framing and timing of the request itself. */
export const BODY_ERRORS: readonly ErrorCode[] = [
  'invalid_json',
  'bad_request',
  'request_timeout',
  'body_too_large',
  'unsupported_media_type',
]

/**
 * What a generation can fail with, before its stream starts (after it, the same bodies arrive as
 * the stream's last event). `request_cancelled` (499) is left out: its client is gone, so nobody
 * reads it.
 */
export const GENERATION_ERRORS: readonly ErrorCode[] = [
  ...BODY_ERRORS,
  'validation_error',
  'grammar_unsupported',
  'adapter_source_unknown',
  'adapter_id_invalid',
  'adapter_invalid',
  'medusa_no_default',
  'medusa_heads_mismatch',
  'auth_missing',
  'auth_invalid',
  'auth_forbidden',
  'adapter_not_found',
  'overloaded',
  'adapter_source_unavailable',
  'adapter_download_failed',
  'backend_not_ready',
  'adapter_not_ready',
  'adapter_slots_full',
  'auth_unavailable',
  'generation_error',
  'adapter_load_failed',
  'native_error',
  ...ANY_ROUTE_ERRORS,
]

/** Parameters for the example message of each documented code (never a secret). */
const SAMPLE: Partial<Record<ErrorCode, { params: ErrorParams; param?: string }>> = {
  validation_error: {
    params: { field: 'temperature', expected: 'must be a number >= 0 and <= 2', received: '7' },
    param: 'temperature',
  },
  invalid_json: { params: { detail: 'Unexpected end of JSON input' } },
  bad_request: { params: { detail: 'the request could not be parsed' } },
  request_timeout: { params: { detail: 'the body did not arrive within 30 s' } },
  body_too_large: { params: { limit: 1048576 } },
  unsupported_media_type: { params: { received: 'text/plain' } },
  model_not_found: { params: { id: 'nope' }, param: 'model' },
  overloaded: { params: { detail: '128 requests are waiting (max_concurrent_requests)' } },
  generation_error: { params: { detail: 'the backend stopped' } },
  internal_error: { params: { detail: 'request 0b9d3c62-4bd6-4a3e-9a1f-7e1bbd0f6c65' } },
  adapter_source_unknown: { params: { source: 'ftp', known: 'local, hub' }, param: 'adapter_source' },
  adapter_id_invalid: { params: { id: '../x', source: 'local', detail: 'must not contain ..' } },
  adapter_not_found: { params: { id: 'nope', source: 'local' } },
  adapter_source_unavailable: { params: { source: 'hub', id: 'org/adapter', detail: 'connection refused' } },
  adapter_download_failed: { params: { id: 'org/adapter', source: 'hub', detail: 'checksum mismatch' } },
  adapter_not_ready: { params: { id: 'org/adapter', source: 'hub', status: 'downloading', detail: 'retry shortly' } },
  adapter_invalid: { params: { id: 'org/adapter', detail: 'rank 512 is above max_lora_rank 128' } },
  adapter_load_failed: { params: { id: 'org/adapter', detail: 'out of memory' } },
  adapter_slots_full: { params: { slots: 8 } },
  medusa_no_default: { params: { id: 'org/medusa' } },
  medusa_heads_mismatch: { params: { id: 'org/medusa', heads: 3, expected: 4 } },
  auth_missing: { params: { id: 'org/private', detail: 'the hub answered 401' } },
  auth_invalid: { params: { id: 'org/private', detail: 'the hub answered 401' } },
  auth_forbidden: { params: { id: 'org/private', detail: 'the hub answered 403' } },
  auth_unavailable: { params: { id: 'org/private', detail: 'the hub did not answer' } },
  template_error: { params: { detail: 'Conversation roles must alternate user/assistant' } },
  template_missing: { params: { model: 'loom-demo' } },
  grammar_unsupported: { params: { detail: '`patternProperties` is not supported' } },
  native_error: { params: { detail: 'kernel launch failed' } },
}

function example(family: ApiFamily, code: ErrorCode) {
  const sample = SAMPLE[code]
  const err = new LoomError(code, sample?.params ?? {}, sample?.param === undefined ? {} : { param: sample.param })
  return { summary: code, value: family === 'native' ? toNativeError(err) : toOpenAiError(err) }
}

/** The error responses of `codes` in `family`'s shape, keyed by HTTP status. */
export function errorResponses(family: ApiFamily, codes: readonly ErrorCode[]): Record<string, JsonSchema> {
  const byStatus = new Map<number, ErrorCode[]>()
  for (const code of new Set(codes)) {
    const status = ERRORS[code].status
    byStatus.set(status, [...(byStatus.get(status) ?? []), code])
  }
  const schema = ref(family === 'native' ? 'NativeError' : 'OpenAiError')
  const responses: Record<string, JsonSchema> = {}
  for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b)) {
    const examples = Object.fromEntries(list.map((code) => [code, example(family, code)]))
    const named = list.map((code) => `\`${code}\``).join(', ')
    responses[String(status)] = response(`Error codes ${named} (docs/errors.md).`, jsonContent(schema, examples))
  }
  return responses
}
