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

// Keys ending like a credential (`hfToken`, `predibase_api_token`, `s3_access_key`) are redacted when
// they hold a string, except the tokenizer's special-token names, whose values are vocabulary entries.
const SECRET_SUFFIXES = [
  'token',
  'secret',
  'password',
  'passphrase',
  'apikey',
  'secretkey',
  'accesskey',
  'privatekey',
  'credential',
  'credentials',
]
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

/** A key as the secret checks compare it: lower-cased, without `_` and `-` (`API-Key` → `apikey`). */
export function normalizeKey(key: string): string {
  return key.toLowerCase().replace(/[-_]/g, '')
}

/**
 * The credential names the checks below know, lower-cased without `_` and `-` (`apitoken`,
 * `secretaccesskey`): exact key names, then the endings that make a key a credential. For callers
 * that look for near misses, such as a misspelt key in a configuration file (`tokn`, `pasword`).
 */
export const SECRET_KEY_NAMES: readonly string[] = Object.freeze([...new Set([...SECRET_KEYS, ...SECRET_SUFFIXES])])

function hasSecretSuffix(normalized: string): boolean {
  return !SPECIAL_TOKEN_KEYS.has(normalized) && SECRET_SUFFIXES.some((suffix) => normalized.endsWith(suffix))
}

/**
 * Whether a property named `key` is meant to hold a credential, whatever it holds now: the keys
 * `isSecretField` redacts, by name alone. A configuration error never shows such a key's value,
 * even a wrongly typed one (`token: [...]`, `password: 1234`).
 */
export function isSecretKey(key: string): boolean {
  const normalized = normalizeKey(key)
  return SECRET_KEYS.has(normalized) || hasSecretSuffix(normalized)
}

/** Whether a property named `key` holding `value` must be redacted from logs. */
export function isSecretField(key: string, value: unknown): boolean {
  const normalized = normalizeKey(key)
  if (SECRET_KEYS.has(normalized)) return value !== undefined && value !== null && value !== ''
  if (typeof value !== 'string' || value === '') return false
  return hasSecretSuffix(normalized)
}

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto: unknown = Object.getPrototypeOf(value)
  return proto === Object.prototype || proto === null
}

/**
 * Copy `value` with every secret field replaced by `[Redacted]` and every string passed through
 * `redactText` (`redactSecrets` unless a caller needs a stricter rule). Only plain objects and
 * arrays are walked: class instances (errors, requests, buffers) are returned as they are, for
 * pino's serializers to turn into plain, redacted data. Cycles become `[Circular]`; nesting deeper
 * than 16 levels becomes `[Object]`.
 */
export function redactObject<T>(value: T, redactText: (text: string) => string = redactSecrets): T {
  return walk(value, 0, new WeakSet(), redactText) as T
}

function walk(value: unknown, depth: number, seen: WeakSet<object>, redactText: (text: string) => string): unknown {
  if (typeof value === 'string') return redactText(value)
  if (value === null || typeof value !== 'object') return value
  const isArray = Array.isArray(value)
  if (!isArray && !isPlainObject(value)) return value
  if (seen.has(value)) return '[Circular]'
  if (depth >= MAX_DEPTH) return isArray ? '[Array]' : '[Object]'
  seen.add(value)
  let result: unknown
  if (isArray) {
    result = value.map((item) => walk(item, depth + 1, seen, redactText))
  } else {
    const copy: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) {
      const cleaned = isSecretField(key, item) ? REDACTED : walk(item, depth + 1, seen, redactText)
      // defineProperty stores a `__proto__` key as data instead of changing the copy's prototype.
      Object.defineProperty(copy, key, { value: cleaned, enumerable: true, writable: true, configurable: true })
    }
    result = copy
  }
  // A value reached twice through different paths is not a cycle.
  seen.delete(value)
  return result
}
