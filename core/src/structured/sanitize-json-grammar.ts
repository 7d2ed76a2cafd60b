/**
 * Repairs the EBNF XGrammar 0.1.27 writes for a JSON schema so that what it matches is valid JSON.
 *
 * Its converter builds string bodies from character classes that let through characters JSON
 * forbids raw inside a string: length-bounded strings use `[^"\\\r\n]` (tab and the other control
 * characters pass), and a `pattern`'s `.` or negated class becomes `[\u0000-\U0010FFFF]` / `[^x]`
 * (a raw `"`, `\` or control character passes, ending or breaking the string). Outside string
 * literals of the grammar itself, every negated class and the any-character class are narrowed to
 * exclude `"`, `\`, U+0000–U+001F and the surrogates. This only removes matches (a value the repaired grammar
 * produces still satisfies the schema), and JSON's own string rule (`basic_string_sub`) already
 * excludes them, so it is unchanged in effect.
 */

const ANY_CHAR = '[\\u0000-\\U0010FFFF]'
/**
 * What a JSON string may not contain raw, written as EBNF class members; surrogate code points
 * too, which XGrammar would emit as 3-byte sequences no UTF-8 decoder accepts.
 */
const FORBIDDEN_IN_STRING = '\\0-\\x1f\\"\\\\'

/** Rewrite one character class (`[...]`, brackets included). */
function narrowClass(cls: string): string {
  if (cls === ANY_CHAR) return `[^${FORBIDDEN_IN_STRING}]`
  if (cls.startsWith('[^')) return `[^${cls.slice(2, -1)}${FORBIDDEN_IN_STRING}]`
  return cls
}

/** Apply `narrowClass` to every character class outside quoted literals and comments. */
export function sanitizeJsonGrammar(ebnf: string): string {
  let out = ''
  let i = 0
  while (i < ebnf.length) {
    const ch = ebnf[i]!
    if (ch === '"' || ch === '[') {
      // A literal ends at the next unescaped quote, a class at the next unescaped bracket.
      const close = ch === '"' ? '"' : ']'
      let j = i + 1
      while (j < ebnf.length && ebnf[j] !== close) j += ebnf[j] === '\\' ? 2 : 1
      const token = ebnf.slice(i, j + 1)
      out += ch === '[' ? narrowClass(token) : token
      i = j + 1
    } else if (ch === '#') {
      const end = ebnf.indexOf('\n', i)
      const stop = end < 0 ? ebnf.length : end
      out += ebnf.slice(i, stop)
      i = stop
    } else {
      out += ch
      i++
    }
  }
  return out
}
