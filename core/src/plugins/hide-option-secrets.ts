import { formatKeyPath, type KeyPath } from '../config/issue-path.ts'
import { looksLikeSecretKey } from '../config/secret-keys.ts'
import { VALUE_NOT_SHOWN, maskCredentials } from '../config/shown-value.ts'

// Shorter option values are not looked for: `on` or `1` would be replaced all over a sentence.
const MIN_HIDDEN_LENGTH = 4
const MAX_DEPTH = 16

/**
 * `text` (the message of a plugin's failed `register()`) without the plugin's credentials. A
 * plugin may quote its options in its own errors (`the gateway refused <token>`), so every string
 * of `options` that sits under a secret-looking key, or came from `${VAR}` substitution (where
 * tokens usually come from), is replaced with `(value not shown)`; URL userinfo and known token
 * formats are masked as well. `prefix` is the rendered path of `options` (`plugins[1].options`),
 * to look up `substituted`.
 */
export function hideOptionSecrets(
  text: string,
  options: unknown,
  prefix: string,
  substituted: ReadonlyMap<string, readonly string[]>,
): string {
  const secrets = new Set<string>()
  const visit = (value: unknown, path: KeyPath, underSecret: boolean): void => {
    if (typeof value === 'string') {
      const fromEnv = substituted.has(formatKeyPath(path, prefix))
      if ((underSecret || fromEnv) && value.length >= MIN_HIDDEN_LENGTH) secrets.add(value)
      return
    }
    if (value === null || typeof value !== 'object' || path.length >= MAX_DEPTH) return
    const isList = Array.isArray(value)
    for (const [key, item] of Object.entries(value)) {
      const step = isList ? Number(key) : key
      visit(item, [...path, step], underSecret || (!isList && looksLikeSecretKey(key)))
    }
  }
  visit(options, [], false)
  // Longest first, so a secret that contains another is replaced whole.
  const hidden = [...secrets]
    .sort((a, b) => b.length - a.length)
    .reduce((out, secret) => out.split(secret).join(VALUE_NOT_SHOWN), text)
  return maskCredentials(hidden)
}
