/**
 * The one scan of an EBNF grammar that the grammar rewrites share: each quoted literal and each
 * character class is passed to `rewrite` (quotes or brackets included) and replaced by what it
 * returns; comments (`#` to the end of the line) and everything else are copied as they are. A
 * literal ends at the next unescaped quote, a class at the next unescaped bracket.
 */
export function mapEbnfTokens(ebnf: string, rewrite: (token: string, kind: 'literal' | 'class') => string): string {
  let out = ''
  let i = 0
  while (i < ebnf.length) {
    const ch = ebnf[i]!
    if (ch === '"' || ch === '[') {
      const close = ch === '"' ? '"' : ']'
      let j = i + 1
      while (j < ebnf.length && ebnf[j] !== close) j += ebnf[j] === '\\' ? 2 : 1
      out += rewrite(ebnf.slice(i, j + 1), ch === '"' ? 'literal' : 'class')
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
