/**
 * Where the literal (`"`) or character class (`[`) opening at `text[start]` ends: the index of its
 * unescaped closing quote or bracket, or `text.length` when it is unterminated.
 */
export function ebnfTokenEnd(text: string, start: number): number {
  const close = text[start] === '"' ? '"' : ']'
  let j = start + 1
  while (j < text.length && text[j] !== close) j += text[j] === '\\' ? 2 : 1
  return Math.min(j, text.length)
}

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
      const j = ebnfTokenEnd(ebnf, i)
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
