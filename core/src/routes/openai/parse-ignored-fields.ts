import { fieldError } from '../../errors/index.ts'
import { isPlainObject, optionalBoolean, optionalString, type Body } from '../../validation/fields.ts'

/** Fields OpenAI clients commonly send that change nothing here: type-checked, then ignored. */
export const IGNORED_FIELDS = ['user', 'metadata', 'store', 'service_tier', 'parallel_tool_calls']

/** OpenAI's documented bounds for `metadata`. */
const METADATA_MAX_PAIRS = 16
const METADATA_MAX_KEY = 64
const METADATA_MAX_VALUE = 512

/**
 * Check the ignored fields as OpenAI types them, so a client bug (`user: 5`) is reported here as
 * it would be by OpenAI instead of passing silently and failing only when the client moves.
 */
export function checkIgnoredFields(body: Body): void {
  optionalString(body, 'user', 'user')
  optionalBoolean(body, 'store', 'store')
  optionalString(body, 'service_tier', 'service_tier')
  optionalBoolean(body, 'parallel_tool_calls', 'parallel_tool_calls')
  checkMetadata(body.metadata)
}

function checkMetadata(metadata: unknown): void {
  if (metadata === undefined || metadata === null) return
  const expected = `must be an object of at most ${METADATA_MAX_PAIRS} string values`
  if (!isPlainObject(metadata)) throw fieldError('metadata', expected, metadata)
  const entries = Object.entries(metadata)
  if (entries.length > METADATA_MAX_PAIRS) throw fieldError('metadata', expected, `${entries.length} keys`)
  for (const [key, value] of entries) {
    if (key.length > METADATA_MAX_KEY) {
      throw fieldError('metadata', `keys must have at most ${METADATA_MAX_KEY} characters`, key)
    }
    if (typeof value !== 'string' || value.length > METADATA_MAX_VALUE) {
      throw fieldError(`metadata.${key}`, `must be a string of at most ${METADATA_MAX_VALUE} characters`, value)
    }
  }
}
