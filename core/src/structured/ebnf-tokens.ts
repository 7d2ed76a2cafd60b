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

/** One piece of an EBNF grammar: a quoted literal, a character class, a comment, or the rest. */
export interface EbnfSegment {
  readonly kind: 'literal' | 'class' | 'comment' | 'other'
  /** The piece's text: quotes or brackets included; a comment runs to (not including) its newline. */
  readonly text: string
}

/**
 * The one scan of an EBNF grammar that the grammar rewrites share. A literal ends at the next
 * unescaped quote, a class at the next unescaped bracket, a comment (`#`) at the end of the line;
 * everything between them (rule names, operators, whitespace) comes as one `other` piece.
 * Joining the pieces' text gives `ebnf` back.
 */
export function ebnfSegments(ebnf: string): EbnfSegment[] {
  const segments: EbnfSegment[] = []
  let other = 0
  let i = 0
  const flushOther = (): void => {
    if (other < i) segments.push({ kind: 'other', text: ebnf.slice(other, i) })
  }
  while (i < ebnf.length) {
    const ch = ebnf[i]!
    let end: number
    let kind: EbnfSegment['kind']
    if (ch === '"' || ch === '[') {
      end = ebnfTokenEnd(ebnf, i) + 1
      kind = ch === '"' ? 'literal' : 'class'
    } else if (ch === '#') {
      const newline = ebnf.indexOf('\n', i)
      end = newline < 0 ? ebnf.length : newline
      kind = 'comment'
    } else {
      i++
      continue
    }
    flushOther()
    segments.push({ kind, text: ebnf.slice(i, end) })
    i = other = end
  }
  flushOther()
  return segments
}

/**
 * Each quoted literal and each character class of `ebnf` passed to `rewrite` (quotes or brackets
 * included) and replaced by what it returns; comments and everything else are copied as they are.
 */
export function mapEbnfTokens(ebnf: string, rewrite: (token: string, kind: 'literal' | 'class') => string): string {
  return ebnfSegments(ebnf)
    .map(({ kind, text }) => (kind === 'literal' || kind === 'class' ? rewrite(text, kind) : text))
    .join('')
}
