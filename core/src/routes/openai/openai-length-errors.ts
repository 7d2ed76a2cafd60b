import { isLoomError, LoomError } from '../../errors/index.ts'

/** The v1 fields that stand for the native ones the generation service names in its length errors. */
export interface OpenAiLengthFields {
  /** `max_tokens`, or `max_completion_tokens` when the chat request limited itself with that. */
  readonly maxTokens: string
  /** The failing prompt's field: `messages`, `prompt`, or `prompt[2]` for one of a list. */
  readonly prompt: string
}

/** Native-only hints inside a length error's `expected` text (v1 has no `truncate` field). */
const NATIVE_HINT = /\s*\([^)]*`truncate`[^)]*\)/g

/**
 * Re-address a length error from the generation service to the v1 request. The service checks
 * prompt length and `max_tokens` once the prompt is tokenized, and names the native fields
 * (`inputs`, `max_new_tokens`, the `truncate` hint); a v1 client must read the field it sent.
 * Anything else passes through unchanged.
 */
export function toOpenAiLengthError(err: unknown, fields: OpenAiLengthFields): unknown {
  if (!isLoomError(err) || err.code !== 'validation_error') return err
  const field = err.param === 'max_new_tokens' ? fields.maxTokens : err.param === 'inputs' ? fields.prompt : null
  if (field === null) return err
  const expected = String(err.params.expected ?? '').replace(NATIVE_HINT, '')
  // A chat prompt is counted after the template adds its role markers: say so, or the count surprises.
  const counted =
    err.param === 'inputs' && field === 'messages' ? `${expected} once the chat template is applied` : expected
  return new LoomError('validation_error', { ...err.params, field, expected: counted }, { param: field, cause: err })
}
