import { SECRET_KEY_NAMES, isSecretKey, normalizeKey } from '../logging/redact-object.ts'
import { editDistance } from './closest-key.ts'

/**
 * Which configuration keys hold credentials. The names come from the log redaction
 * (`isSecretKey`), so a value hidden from the logs is hidden from startup errors too; on top of
 * that, an unknown key that is a near miss of a credential name (`tokn`, `hf_tokn`, `pasword`,
 * `api_kye`) counts as one, because the value under a misspelt `token:` is still the token.
 */

// Beyond this depth a value is not inspected key by key: it is treated as holding a secret.
const MAX_DEPTH = 16

/**
 * Whether `key` names a credential or is a typo of one: the key is within two edits of a
 * credential name (a swapped pair costs two: `toekn`, `secert`), or its ending is within one edit
 * (two for names of six letters or more) of a credential ending (`hf_tokn`, `db_pasword`). Keys
 * shorter than four letters never count as typos (`id`, `url`).
 */
export function looksLikeSecretKey(key: string): boolean {
  if (isSecretKey(key)) return true
  const normalized = normalizeKey(key)
  // An exact credential ending that `isSecretKey` declined is a tokenizer name (`eos_token`).
  if (normalized.length < 4 || SECRET_KEY_NAMES.some((name) => normalized.endsWith(name))) return false
  const near = (part: string, name: string, limit: number): boolean =>
    part.length >= 4 && editDistance(part, name) <= limit
  return SECRET_KEY_NAMES.some((name) => {
    const limit = name.length >= 6 ? 2 : 1
    const endings = [normalized.slice(-name.length), normalized.slice(1 - name.length)]
    return near(normalized, name, 2) || endings.some((ending) => near(ending, name, limit))
  })
}

/** Whether `value` (a mapping or list from the file) has a secret-looking key anywhere inside. */
export function holdsSecretKey(value: unknown, depth = 0): boolean {
  if (value === null || typeof value !== 'object') return false
  if (depth >= MAX_DEPTH) return true
  const isList = Array.isArray(value)
  return Object.entries(value).some(
    ([key, item]) => (!isList && looksLikeSecretKey(key)) || holdsSecretKey(item, depth + 1),
  )
}
