import { REDACTED, redactSecrets } from './redact-secrets.ts'

/**
 * Deep redaction of logged objects. pino's own `redact` option needs every path spelled out, but a
 * token can sit at any depth of a request body (`api_token`, `parameters.api_token`, a plugin's
 * `options.accessToken`), so logged objects are walked instead.
 */

// Keys (compared lowercased, without `_` and `-`) whose value is always a credential.
const SECRET_KEYS = new Set([
  'apitoken',
  'token',
  'accesstoken',
  'authtoken',
  'refreshtoken',
  'idtoken',
  'sessiontoken',
  'bearertoken',
  'authorization',
  'proxyauthorization',
  'cookie',
  'setcookie',
  'password',
  'passwd',
  'secret',
  'clientsecret',
  'apikey',
  'xapikey',
  'privatekey',
  'secretkey',
  'secretaccesskey',
  'awssecretaccesskey',
  'awssessiontoken',
])

// Keys ending like a credential (`hfToken`, `predibase_api_token`) are redacted when they hold a
// string, except the tokenizer's special-token names, whose values are vocabulary entries.
const SECRET_SUFFIXES = ['token', 'secret', 'password', 'apikey', 'secretkey']
const SPECIAL_TOKEN_KEYS = new Set([
  'bostoken',
  'eostoken',
  'padtoken',
  'unktoken',
  'septoken',
  'clstoken',
  'masktoken',
  'ignoreeostoken',
])

const MAX_DEPTH = 16

function normalizeKey(key: string): string {
  return key.toLowerCase().replace(/[-_]/g, '')
}

/** Whether a property named `key` holding `value` must be redacted from logs. */
export function isSecretField(key: string, value: unknown): boolean {
  const normalized = normalizeKey(key)
  if (SECRET_KEYS.has(normalized)) return value !== undefined && value !== null && value !== ''
  if (typeof value !== 'string' || value === '' || SPECIAL_TOKEN_KEYS.has(normalized)) return false
  return SECRET_SUFFIXES.some((suffix) => normalized.endsWith(suffix))
}

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto: unknown = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/**
 * Copy `value` with every secret field replaced by `[Redacted]` and every string passed through
 * `redactSecrets`. Only plain objects and arrays are walked: class instances (errors, requests,
 * buffers) are returned as they are, for pino's serializers to turn into plain, redacted data.
 * Cycles become `[Circular]`; nesting deeper than 16 levels becomes `[Object]`.
 */
export function redactObject<T>(value: T): T {
  return walk(value, 0, new WeakSet()) as T
}

function walk(value: unknown, depth: number, seen: WeakSet<object>): unknown {
  if (typeof value === 'string') return redactSecrets(value)
  if (value === null || typeof value !== 'object') return value
  const isArray = Array.isArray(value)
  if (!isArray && !isPlainObject(value)) return value
  if (seen.has(value)) return '[Circular]'
  if (depth >= MAX_DEPTH) return isArray ? '[Array]' : '[Object]'
  seen.add(value)
  let result: unknown
  if (isArray) {
    result = value.map((item) => walk(item, depth + 1, seen))
  } else {
    const copy: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) {
      const cleaned = isSecretField(key, item) ? REDACTED : walk(item, depth + 1, seen)
      // defineProperty stores a `__proto__` key as data instead of changing the copy's prototype.
      Object.defineProperty(copy, key, { value: cleaned, enumerable: true, writable: true, configurable: true })
    }
    result = copy
  }
  // A value reached twice through different paths is not a cycle.
  seen.delete(value)
  return result
}
