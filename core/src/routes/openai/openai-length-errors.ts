import { isLoomError, LoomError } from '../../errors/index.ts'

/** The v1 fields that stand for the native ones the generation service names in its length errors. */
export interface OpenAiLengthFields {
  /** `max_tokens`, or `max_completion_tokens` when the chat request limited itself with that. */
  readonly maxTokens: string
  /** The length the endpoint used because the client sent no length field, or null when it sent one. */
  readonly defaultMaxTokens: number | null
  /** The failing prompt's field: `messages`, `prompt`, or `prompt[2]` for one of a list. */
  readonly prompt: string
}

/** Native-only hints inside a length error's `expected` text (v1 has no `truncate` field). */
const NATIVE_HINT = /\s*\([^)]*`(?:parameters\.)?truncate`[^)]*\)/g

/**
 * Re-address a length error from the generation service to the v1 request. The service checks
 * prompt length and `max_tokens` once the prompt is tokenized, and names the native fields
 * (`inputs`, `parameters.max_new_tokens`, the `parameters.truncate` hint); a v1 client must read the field it sent.
 * Anything else passes through unchanged.
 */
export function toOpenAiLengthError(err: unknown, fields: OpenAiLengthFields): unknown {
  if (!isLoomError(err) || err.code !== 'validation_error') return err
  const field =
    err.param === 'parameters.max_new_tokens' ? fields.maxTokens : err.param === 'inputs' ? fields.prompt : null
  if (field === null) return err
  let expected = String(err.params.expected ?? '').replace(NATIVE_HINT, '')
  if (err.param === 'parameters.max_new_tokens' && fields.defaultMaxTokens !== null) {
    // The client sent no length: say where the number came from and how to change it.
    expected += ` (not sent, so its default ${fields.defaultMaxTokens} applies; send a smaller \`${field}\` or a shorter prompt)`
  }
  // A chat prompt is counted after the template adds its role markers: say so, or the count surprises.
  if (err.param === 'inputs' && field === 'messages') expected += ' once the chat template is applied'
  return new LoomError('validation_error', { ...err.params, field, expected }, { param: field, cause: err })
}
