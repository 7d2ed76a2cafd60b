/**
 * Rewrites the pieces of an EBNF grammar that describe the inside of a JSON string so that they
 * only ever produce valid JSON string text in valid UTF-8.
 *
 * A regex (a schema's `pattern`) speaks about the string's value, but XGrammar writes its
 * characters into the JSON text as they are: a `"` or `\` or a control character would end or
 * break the string. Literals are therefore written as JSON writes them (`"` becomes `\"`: the
 * value still matches the regex exactly); character classes lose `"`, `\` and the control
 * characters U+0000–U+001F (values with those characters are never produced: a subset of what the
 * regex allows, never a superset).
 *
 * XGrammar 0.1.27 reads a class member above U+007F as a byte, not a character: `[^x]` matches
 * any byte sequence shaped like UTF-8, surrogates and code points past U+10FFFF included (invalid
 * UTF-8, which a decoder turns into several U+FFFD, breaking `maxLength`), and `[a-é]` matches
 * single bytes. So classes are rewritten to printable ASCII, plus `UTF8_NON_ASCII` (exactly the
 * valid UTF-8 encodings of U+0080–U+10FFFF but the surrogates, byte by byte) where the class
 * allowed every non-ASCII character. A class naming only some non-ASCII characters loses them.
 */

/** Inclusive code point ranges. */
type Ranges = [number, number][]

/**
 * Every valid multi-byte UTF-8 sequence, by byte ranges. XGrammar turns a one-byte class such as
 * `[\xe0-\xe0]` into the character U+00E0, so each lead byte that needs its own second-byte range
 * (E0, ED, F0, F4) shares a class with a neighbour for which that range is valid too.
 */
export const UTF8_NON_ASCII = [
  '[\\xc2-\\xdf] [\\x80-\\xbf]',
  '[\\xe0-\\xe1] [\\xa0-\\xbf] [\\x80-\\xbf]',
  '[\\xe1-\\xec] [\\x80-\\xbf] [\\x80-\\xbf]',
  '[\\xec-\\xed] [\\x80-\\x9f] [\\x80-\\xbf]',
  '[\\xee-\\xef] [\\x80-\\xbf] [\\x80-\\xbf]',
  '[\\xf0-\\xf1] [\\x90-\\xbf] [\\x80-\\xbf] [\\x80-\\xbf]',
  '[\\xf1-\\xf3] [\\x80-\\xbf] [\\x80-\\xbf] [\\x80-\\xbf]',
  '[\\xf3-\\xf4] [\\x80-\\x8f] [\\x80-\\xbf] [\\x80-\\xbf]',
]
  .map((seq) => `(${seq})`)
  .join(' | ')

/** What may stand raw in a JSON string within ASCII: printable characters and DEL, less `"` and `\`. */
const ASCII_ALLOWED: Ranges = [
  [0x20, 0x21],
  [0x23, 0x5b],
  [0x5d, 0x7f],
]
/** Every non-ASCII code point but the surrogates. */
const NON_ASCII: Ranges = [
  [0x80, 0xd7ff],
  [0xe000, 0x10ffff],
]
const MAX_CODE_POINT = 0x10ffff

const SIMPLE_ESCAPES: Readonly<Record<string, number>> = {
  n: 0x0a,
  r: 0x0d,
  t: 0x09,
  f: 0x0c,
  v: 0x0b,
  b: 0x08,
  '0': 0x00,
  a: 0x07,
  e: 0x1b,
}

/** Reads one (possibly escaped) code point of an EBNF literal or class at `i`; returns it and the next index. */
function readChar(text: string, i: number): [number, number] {
  const cp = text.codePointAt(i)!
  if (cp !== 0x5c) return [cp, i + (cp > 0xffff ? 2 : 1)]
  const e = text[i + 1]
  if (e === undefined) throw new Error('dangling escape in grammar text')
  const hexLength = e === 'x' ? 2 : e === 'u' ? 4 : e === 'U' ? 8 : 0
  if (hexLength > 0) {
    const hex = text.slice(i + 2, i + 2 + hexLength)
    if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== hexLength) throw new Error(`bad escape \\${e}${hex}`)
    return [parseInt(hex, 16), i + 2 + hexLength]
  }
  const simple = SIMPLE_ESCAPES[e]
  if (simple !== undefined) return [simple, i + 2]
  const other = text.codePointAt(i + 1)!
  return [other, i + 1 + (other > 0xffff ? 2 : 1)]
}

/** A code point as an EBNF character (escaped unless plainly printable). */
function writeChar(cp: number, inClass: boolean): string {
  if (cp >= 0x20 && cp < 0x7f) {
    const ch = String.fromCharCode(cp)
    const special = inClass ? '\\]-^[' : '\\"'
    return special.includes(ch) ? `\\${ch}` : ch
  }
  if (cp <= 0xff) return `\\x${cp.toString(16).padStart(2, '0')}`
  if (cp <= 0xffff) return `\\u${cp.toString(16).padStart(4, '0')}`
  return `\\U${cp.toString(16).padStart(8, '0')}`
}

function normalize(ranges: Ranges): Ranges {
  const sorted = ranges.map(([a, b]): [number, number] => [a, b]).sort((x, y) => x[0] - y[0])
  const out: Ranges = []
  for (const [a, b] of sorted) {
    const last = out[out.length - 1]
    if (last !== undefined && a <= last[1] + 1) last[1] = Math.max(last[1], b)
    else out.push([a, b])
  }
  return out
}

function complement(ranges: Ranges): Ranges {
  const out: Ranges = []
  let next = 0
  for (const [a, b] of normalize(ranges)) {
    if (a > next) out.push([next, a - 1])
    next = b + 1
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT])
  return out
}

function intersect(ranges: Ranges, other: Ranges): Ranges {
  const out: Ranges = []
  for (const [a, b] of normalize(ranges)) {
    for (const [c, d] of other) {
      const lo = Math.max(a, c)
      const hi = Math.min(b, d)
      if (lo <= hi) out.push([lo, hi])
    }
  }
  return normalize(out)
}

const covers = (ranges: Ranges, part: Ranges): boolean =>
  JSON.stringify(intersect(ranges, part)) === JSON.stringify(normalize(part))

/**
 * A class (`[...]` or `[^...]`, brackets included) narrowed to what may stand raw in a JSON
 * string (see the file comment): an ASCII class, `UTF8_NON_ASCII`, or a group of both; null when
 * nothing is left.
 */
export function narrowClassForJsonString(cls: string): string | null {
  const negated = cls.startsWith('[^')
  const body = cls.slice(negated ? 2 : 1, -1)
  const ranges: Ranges = []
  let i = 0
  while (i < body.length) {
    const [from, afterFrom] = readChar(body, i)
    i = afterFrom
    if (body[i] === '-' && i + 1 < body.length) {
      const [to, afterTo] = readChar(body, i + 1)
      ranges.push([from, to])
      i = afterTo
    } else {
      ranges.push([from, from])
    }
  }
  const members = negated ? complement(ranges) : normalize(ranges)
  const ascii = intersect(members, ASCII_ALLOWED)
  const parts: string[] = []
  if (ascii.length > 0) {
    const written = ascii.map(([a, b]) =>
      a === b ? writeChar(a, true) : `${writeChar(a, true)}${b === a + 1 ? '' : '-'}${writeChar(b, true)}`,
    )
    parts.push(`[${written.join('')}]`)
  }
  if (covers(members, NON_ASCII)) parts.push(UTF8_NON_ASCII)
  if (parts.length === 0) return null
  return parts.length === 1 && ascii.length > 0 ? parts[0]! : `(${parts.join(' | ')})`
}

/** A literal (`"..."`, quotes included) rewritten to the JSON string text of its value. */
export function escapeLiteralForJsonString(literal: string): string {
  const body = literal.slice(1, -1)
  let value = ''
  let i = 0
  while (i < body.length) {
    const [cp, next] = readChar(body, i)
    value += String.fromCodePoint(cp)
    i = next
  }
  const json = JSON.stringify(value).slice(1, -1)
  let out = ''
  for (const ch of json) out += writeChar(ch.codePointAt(0)!, false)
  return `"${out}"`
}
