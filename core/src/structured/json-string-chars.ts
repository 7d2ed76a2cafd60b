/**
 * Rewrites the pieces of an EBNF grammar that describe the inside of a JSON string so that they
 * only ever produce valid JSON string text.
 *
 * A regex (a schema's `pattern`) speaks about the string's value, but XGrammar writes its
 * characters into the JSON text as they are: a `"` or `\` or a control character would end or
 * break the string. Literals are therefore written as JSON writes them (`"` becomes `\"`: the
 * value still matches the regex exactly); character classes lose `"`, `\`, the control characters
 * U+0000–U+001F and the surrogates (values with those characters are never produced: a subset of
 * what the regex allows, never a superset).
 */

/** Inclusive code point ranges, sorted and disjoint. */
type Ranges = [number, number][]

const FORBIDDEN: Ranges = [
  [0x00, 0x1f],
  [0x22, 0x22],
  [0x5c, 0x5c],
  [0xd800, 0xdfff],
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
  const sorted = [...ranges].sort((a, b) => a[0] - b[0])
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

function subtract(ranges: Ranges, remove: Ranges): Ranges {
  const keep = complement(remove)
  const out: Ranges = []
  for (const [a, b] of normalize(ranges)) {
    for (const [c, d] of keep) {
      const lo = Math.max(a, c)
      const hi = Math.min(b, d)
      if (lo <= hi) out.push([lo, hi])
    }
  }
  return out
}

/**
 * A class (`[...]` or `[^...]`, brackets included) narrowed to what may appear raw in a JSON
 * string, written as a positive class; null when nothing is left.
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
  const members = subtract(negated ? complement(ranges) : ranges, FORBIDDEN)
  if (members.length === 0) return null
  const parts = members.map(([a, b]) =>
    a === b ? writeChar(a, true) : `${writeChar(a, true)}${b === a + 1 ? '' : '-'}${writeChar(b, true)}`,
  )
  return `[${parts.join('')}]`
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
