import { holdsSecretKey, looksLikeSecretKey } from '../config/secret-keys.ts'
import { INVISIBLE_CHARACTERS, LoomError, fieldError } from '../errors/index.ts'

/**
 * Small, explicit readers for request bodies. Each names the full field path in its error
 * ("`parameters.top_p` must be > 0 and <= 1; received 1.5") so a client knows exactly what to fix.
 * Absent and `null` are treated alike: the reader returns `undefined` and the caller picks the default.
 */

export type Body = Readonly<Record<string, unknown>>

export function isPlainObject(value: unknown): value is Body {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** The object at `path`, or a 422 naming it. */
export function expectObject(value: unknown, path: string): Body {
  if (!isPlainObject(value)) throw fieldError(path, 'must be a JSON object', value)
  return value
}

export function optionalObject(body: Body, key: string, path: string): Body | undefined {
  const value = body[key]
  if (value === undefined || value === null) return undefined
  return expectObject(value, path)
}

export interface NumberRule {
  readonly integer?: boolean
  /** Inclusive lower bound. */
  readonly min?: number
  /** Exclusive lower bound. */
  readonly above?: number
  /** Inclusive upper bound. */
  readonly max?: number
  /** Exclusive upper bound. */
  readonly below?: number
}

function describeRule(rule: NumberRule): string {
  const parts: string[] = []
  if (rule.min !== undefined) parts.push(`>= ${rule.min}`)
  if (rule.above !== undefined) parts.push(`> ${rule.above}`)
  if (rule.max !== undefined) parts.push(`<= ${rule.max}`)
  if (rule.below !== undefined) parts.push(`< ${rule.below}`)
  const kind = rule.integer ? 'an integer' : 'a number'
  return parts.length === 0 ? `must be ${kind}` : `must be ${kind} ${parts.join(' and ')}`
}

export function optionalNumber(body: Body, key: string, path: string, rule: NumberRule = {}): number | undefined {
  const value = body[key]
  if (value === undefined || value === null) return undefined
  const ok =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (!rule.integer || Number.isInteger(value)) &&
    (rule.min === undefined || value >= rule.min) &&
    (rule.above === undefined || value > rule.above) &&
    (rule.max === undefined || value <= rule.max) &&
    (rule.below === undefined || value < rule.below)
  if (!ok) throw fieldError(path, describeRule(rule), value)
  return value as number
}

export function optionalBoolean(body: Body, key: string, path: string): boolean | undefined {
  const value = body[key]
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'boolean') throw fieldError(path, 'must be true or false', value)
  return value
}

export function optionalString(
  body: Body,
  key: string,
  path: string,
  options: { nonEmpty?: boolean } = {},
): string | undefined {
  const value = body[key]
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'string') throw fieldError(path, 'must be a string', value)
  if (options.nonEmpty && value.length === 0) throw fieldError(path, 'must not be empty', value)
  return value
}

export function requiredString(body: Body, key: string, path: string, options: { nonEmpty?: boolean } = {}): string {
  const value = optionalString(body, key, path, options)
  if (value === undefined) throw fieldError(path, 'is required (a string)', body[key])
  return value
}

/** A list of strings; a bare string is accepted as a one-element list when `allowSingle` is set. */
export function optionalStringList(
  body: Body,
  key: string,
  path: string,
  options: { allowSingle?: boolean; maxItems?: number } = {},
): string[] | undefined {
  const value = body[key]
  if (value === undefined || value === null) return undefined
  const list = typeof value === 'string' && options.allowSingle ? [value] : value
  const expected = options.allowSingle ? 'must be a string or an array of strings' : 'must be an array of strings'
  if (!Array.isArray(list) || list.some((item) => typeof item !== 'string')) throw fieldError(path, expected, value)
  if (options.maxItems !== undefined && list.length > options.maxItems) {
    throw fieldError(path, `must have at most ${options.maxItems} entries`, value)
  }
  return list as string[]
}

/** A 64-bit unsigned seed: a non-negative integer (JSON numbers above 2^53 lose precision, so we cap there). */
export function optionalSeed(body: Body, key: string, path: string): bigint | undefined {
  const value = optionalNumber(body, key, path, { integer: true, min: 0, max: Number.MAX_SAFE_INTEGER })
  return value === undefined ? undefined : BigInt(value)
}

/** Refuse keys a route does not know, so a typo (`max_new_token`) is not silently ignored. */
export function rejectUnknownKeys(body: Body, known: ReadonlySet<string>, path: string): void {
  for (const key of Object.keys(body)) {
    if (!known.has(key)) {
      const field = path === '' ? key : `${path}.${key}`
      // A credential under a wrong name (`api_token` one level off, `hf_token`, `api_tokn`) is
      // still a credential: the error must not repeat it.
      if ((looksLikeSecretKey(key) && holdsText(body[key])) || holdsSecretKey(body[key])) {
        throw new LoomError(
          'validation_error',
          { field, expected: 'is not a known field', received: '(value not shown)' },
          { param: field },
        )
      }
      throw fieldError(field, 'is not a known field', body[key])
    }
  }
}

/** Whether `value` is or contains a string (a number under `max_new_token` is no credential). */
function holdsText(value: unknown, depth = 0): boolean {
  if (typeof value === 'string') return true
  if (value === null || typeof value !== 'object') return false
  return depth >= 16 || Object.values(value).some((item) => holdsText(item, depth + 1))
}

/** What an HTTP credential may hold: visible ASCII, no spaces (RFC 6750's b64token is stricter). */
const CREDENTIAL = /^[\x21-\x7e]+$/

/**
 * A credential (`api_token`): a string of visible ASCII, the only characters an
 * `Authorization` header can carry to a hub. Empty counts as absent. Its value never appears in
 * an error: the message describes only its type or length, since the field holds a secret even
 * when it is malformed.
 */
export function optionalCredential(body: Body, key: string, path: string): string | undefined {
  const value = body[key]
  if (value === undefined || value === null || value === '') return undefined
  const refuse = (expected: string, received: string) =>
    new LoomError('validation_error', { field: path, expected, received }, { param: path })
  if (typeof value !== 'string') {
    throw refuse(
      'must be a string',
      Array.isArray(value)
        ? 'an array (value not shown)'
        : `${/^[aeiou]/.test(typeof value) ? 'an' : 'a'} ${typeof value} (value not shown)`,
    )
  }
  if (!CREDENTIAL.test(value)) {
    throw refuse(
      'must contain only visible ASCII characters (no spaces, line breaks or other characters)',
      `a string of ${value.length} characters (value not shown)`,
    )
  }
  return value
}

/** Whether `token` could be sent as an `Authorization: Bearer` credential (see `optionalCredential`). */
export function isWellFormedCredential(token: string): boolean {
  return CREDENTIAL.test(token)
}

/** Longest adapter id accepted: hub ids are at most 96 characters; S3 URLs and local paths run longer. */
export const MAX_ADAPTER_ID_LENGTH = 1024
/** Longest `adapter_source` code accepted. */
export const MAX_SOURCE_NAME_LENGTH = 64
// C0 controls and the characters `describeValue` escapes: invisible or reordering in a log.
const CONTROL_CHARACTER = new RegExp(`[\u0000-\u001f${INVISIBLE_CHARACTERS}]`)

/**
 * A name for something the server looks up (an adapter id, a source code): a string of at most
 * `maxLength` characters without control characters. Bounded because it is repeated in errors,
 * logs and response headers.
 */
export function checkIdentifier(value: string, path: string, maxLength: number): string {
  if (value.length > maxLength) throw fieldError(path, `must be at most ${maxLength} characters long`, value)
  if (CONTROL_CHARACTER.test(value)) {
    throw fieldError(path, 'must not contain control or invisible formatting characters', value)
  }
  return value
}

/** `optionalString` plus `checkIdentifier`. */
export function optionalIdentifier(
  body: Body,
  key: string,
  path: string,
  maxLength: number,
  options: { nonEmpty?: boolean } = {},
): string | undefined {
  const value = optionalString(body, key, path, options)
  return value === undefined ? undefined : checkIdentifier(value, path, maxLength)
}
