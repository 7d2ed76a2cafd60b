/**
 * Repairs the EBNF XGrammar 0.1.27 writes for a JSON schema so that what it matches is valid JSON
 * in valid UTF-8.
 *
 * Its converter builds string bodies from negated character classes: length-bounded strings use
 * `[^"\\\r\n]` (tab and the other control characters pass), JSON's own string rule uses
 * `[^\0-\x1f"\\]`, and XGrammar matches the non-ASCII part of a negated class as any UTF-8-shaped
 * byte sequence (surrogates and code points past U+10FFFF too: invalid UTF-8). Outside string
 * literals of the grammar itself, every negated class and the any-character class are rewritten
 * by `narrowClassForJsonString` to printable ASCII less `"` and `\` (and whatever ASCII the class
 * excluded) or exactly-valid multi-byte UTF-8. This only removes matches: a value the repaired
 * grammar produces still satisfies the schema. Negated classes appear only inside strings in
 * XGrammar's JSON grammars, so no structural rule is touched.
 */
import { mapEbnfTokens } from './ebnf-tokens.ts'
import { narrowClassForJsonString } from './json-string-chars.ts'

const ANY_CHAR = '[\\u0000-\\U0010FFFF]'

/** Rewrite one character class (`[...]`, brackets included). */
function narrowClass(cls: string): string {
  if (cls.toLowerCase() === ANY_CHAR.toLowerCase() || cls === '[\\0-\\U0010ffff]' || cls.startsWith('[^')) {
    return narrowClassForJsonString(cls) ?? cls
  }
  return cls
}

/** Apply `narrowClass` to every character class outside quoted literals and comments. */
export function sanitizeJsonGrammar(ebnf: string): string {
  return mapEbnfTokens(ebnf, (token, kind) => (kind === 'class' ? narrowClass(token) : token))
}
