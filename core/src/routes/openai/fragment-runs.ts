import type { AlignedPiece, Alignment } from './token-alignment.ts'

/** U+FFFD: what decoding a token alone gives for bytes that are only part of a character. */
const REPLACEMENT = '\uFFFD'

/** Whether a token's string (`decode([id])`) shows it holds part of a character. */
export function isFragment(piece: string): boolean {
  return piece.includes(REPLACEMENT)
}

/**
 * Tokens that hold only part of a multi-byte UTF-8 character (byte-fallback and byte-level BPE
 * tokens for "é", "—", emoji) decode alone to U+FFFD, so their strings say neither which characters
 * they make nor how many. A run of such tokens is placed as a whole instead: each U+FFFD stands for
 * one or more non-ASCII characters, the run's other characters for themselves, and the run ends
 * where the token after it matches. Inside the run, tokens are walked in step with the UTF-8 bytes
 * of the characters it covers, counting a byte per U+FFFD: exact for byte tokens (one byte each,
 * the common case); where a token holds several bytes of one character, later tokens of the run get
 * offsets a little early, and the last token still ends the run, so nothing after it drifts.
 */
export function placeFragments(
  text: string,
  cursor: number,
  run: readonly string[],
  next: string | undefined,
  final: boolean,
): Alignment | null {
  const end = runEnd(text, cursor, run, next, final)
  if (end === null) {
    if (!final) return null
    // Not in the text at all (a stop sequence removed it): the next character's index for each.
    return { aligned: run.map((shown) => ({ offset: cursor, shown, bytes: null, inText: false })), end: cursor }
  }
  return { aligned: spread(text, cursor, end, run), end }
}

/** A run's end in `text`, or null when it cannot be known yet (`final` false) or is not there. */
function runEnd(text: string, cursor: number, run: readonly string[], next: string | undefined, final: boolean) {
  const body = patternOf(run.join(''))
  const known = next !== undefined && next !== '' && !isFragment(next)
  // The token after the run pins its end; a lazy match then stops at the first place it fits.
  if (known) {
    const end = matchEnd(`\\s*${body.lazy}(?=\\s*${escape(next)})`, text, cursor)
    if (end !== null) return end
  }
  if (!final) return null
  return matchEnd(`\\s*${body.greedy}`, text, cursor)
}

function matchEnd(source: string, text: string, cursor: number): number | null {
  const pattern = new RegExp(source, 'uy')
  pattern.lastIndex = cursor
  const match = pattern.exec(text)
  return match === null || match[0].length === 0 ? null : cursor + match[0].length
}

/** The run's strings as a pattern: each group of U+FFFD is one or more non-ASCII characters. */
function patternOf(joined: string): { lazy: string; greedy: string } {
  const parts = joined.split(/(\uFFFD+)/u).filter((part) => part !== '')
  const build = (quantifier: string) =>
    parts.map((part) => (part.startsWith(REPLACEMENT) ? `\\P{ASCII}${quantifier}` : escape(part))).join('')
  return { lazy: build('+?'), greedy: build('+') }
}

function escape(literal: string): string {
  return literal.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&')
}

/** Give each token of a run placed on `text[start, end)` its offset, and its bytes where they are exact. */
function spread(text: string, start: number, end: number, run: readonly string[]): AlignedPiece[] {
  const segment = text.slice(start, end)
  // Whitespace a token's string lost (SentencePiece) belongs to the run's first token.
  const base = start + segment.length - segment.trimStart().length
  const chars = [...text.slice(base, end)]
  const bytes = [...Buffer.from(text.slice(base, end), 'utf8')]
  const estimates = run.map((piece) =>
    [...piece].reduce((sum, ch) => sum + (ch === REPLACEMENT ? 1 : Buffer.byteLength(ch, 'utf8')), 0),
  )
  const exact = estimates.reduce((a, b) => a + b, 0) === bytes.length
  // UTF-16 index (from `base`) of the character holding each byte.
  const indexOfByte: number[] = []
  let unit = 0
  for (const ch of chars) {
    for (let b = 0; b < Buffer.byteLength(ch, 'utf8'); b++) indexOfByte.push(unit)
    unit += ch.length
  }
  let at = 0
  return run.map((shown, i) => {
    const first = at
    at += estimates[i]!
    const inText = first < bytes.length
    return {
      offset: i === 0 ? start : inText ? base + indexOfByte[first]! : end,
      shown,
      bytes: exact ? bytes.slice(first, at) : null,
      inText: i === 0 || inText,
    }
  })
}
