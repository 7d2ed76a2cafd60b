import { describeValue } from '../errors/index.ts'
import { redactObject } from '../logging/redact-object.ts'
import { REDACTED, redactSecrets } from '../logging/redact-secrets.ts'
import type { KeyPath } from './issue-path.ts'
import { holdsSecretKey, looksLikeSecretKey } from './secret-keys.ts'

/**
 * The "found …" part of a configuration error. Startup errors go to the terminal and from there to
 * CI logs and bug reports, so a value that may be a credential is never shown.
 */

/** What a configuration error says instead of a value that may be a secret. */
export const VALUE_NOT_SHOWN = '(value not shown)'

// The userinfo of a URL (`https://user:password@host`, `https://TOKEN@host`): everything between
// `//` and the last `@` of the word. A `/` before that `@` ends the authority, unless a `:` says a
// password may hold it (`https://hub.example/@org/x` is a path, `https://u:pa/ss@h` is not).
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)([^\s"'`<>]*)@/gi

/**
 * `text` with credentials masked: the whole userinfo of any URL (the log redaction keeps the user
 * name, but in a configuration it is as often a token), then everything `redactSecrets` finds
 * (`hf_…` tokens, `api_token=…`, `Bearer …`).
 */
export function maskCredentials(text: string): string {
  const masked = text.replace(URL_USERINFO, (whole, scheme: string, userinfo: string) =>
    userinfo.includes('/') && !userinfo.includes(':') ? whole : `${scheme}${REDACTED}@`,
  )
  return redactSecrets(masked)
}

/**
 * Render the value found at `path` (relative to the file's root, or to a plugin's `options`) for
 * an error message: JSON, cut to 80 characters, with credentials masked before the cut. Nothing
 * but `(value not shown)` when any key on the path looks like a credential or a typo of one
 * (`token`, `headers.Authorization`, `tokn`), or when the value has such a key inside.
 */
export function showConfigValue(value: unknown, path: KeyPath): string {
  const secretPath = path.some((key) => typeof key === 'string' && looksLikeSecretKey(key))
  if (secretPath || holdsSecretKey(value)) return VALUE_NOT_SHOWN
  return describeValue(redactObject(value, maskCredentials))
}
