/**
 * Bounds every whitespace run of an XGrammar JSON grammar, and narrows it to spaces for compact
 * output.
 *
 * XGrammar 0.1.27 applies `max_whitespace_cnt` only to the rules it generates for a schema's own
 * objects. Its `basic_*` rules — the free-form JSON behind `{"type":"object"}` without properties
 * (Loom's `json_object`), untyped values, `additionalProperties` and `items` left open — keep
 * `[ \n\t]*` after `{` and `[`, around `,` and before `}` and `]`. A small model masked by such a
 * grammar can emit blanks until `max_tokens` (`{` and hundreds of newlines: never valid JSON).
 * Every `[ \n\t]*` is therefore replaced with a rule allowing at most `maxWhitespace` characters,
 * the same bound XGrammar uses elsewhere in the grammar.
 *
 * XGrammar has no "at most one space" mode (without `any_whitespace` it writes fixed separators,
 * `", "` and `": "`, and nothing elsewhere). With `spacesOnly`, every structural whitespace class
 * also becomes `[ ]`: compiled with `max_whitespace_cnt` 1, that is Outlines' `[ ]?` at every gap.
 *
 * Only classes that admit a raw newline are touched: a raw newline cannot occur inside a JSON
 * string, so such a class is structural whitespace and never part of a string's contents.
 */
import { ebnfSegments } from './ebnf-tokens.ts'

/** The rule that replaces each unbounded whitespace run. */
const BOUNDED_WHITESPACE_RULE = 'loom_ws'

/** A class of JSON whitespace characters only (space, tab, newline, carriage return), newline among them. */
function isStructuralWhitespace(cls: string): boolean {
  return /^\[(?: |\\t|\\n|\\r)+\]$/.test(cls) && cls.includes('\\n')
}

/**
 * `ebnf` with each `[ \n\t]*` (any class of JSON whitespace that includes the newline, starred)
 * limited to `maxWhitespace` characters; with `spacesOnly`, every such class (starred or not)
 * admits only the space. Returns `ebnf` unchanged when there is nothing to rewrite.
 */
export function boundJsonWhitespace(ebnf: string, maxWhitespace: number, spacesOnly = false): string {
  if (!Number.isInteger(maxWhitespace) || maxWhitespace < 1) {
    throw new RangeError(`maxWhitespace must be a positive integer, got ${maxWhitespace}`)
  }
  const allowed = spacesOnly ? '[ ]' : '[ \\n\\t]'
  const segments = ebnfSegments(ebnf)
  let bounded = false
  let out = ''
  for (let i = 0; i < segments.length; i++) {
    const { kind, text } = segments[i]!
    if (kind !== 'class' || !isStructuralWhitespace(text)) {
      out += text
      continue
    }
    const next = segments[i + 1]
    if (next?.kind !== 'other' || next.text[0] !== '*') {
      out += spacesOnly ? allowed : text
      continue
    }
    bounded = true
    out += BOUNDED_WHITESPACE_RULE
    segments[i + 1] = { kind: 'other', text: next.text.slice(1) }
  }
  if (!bounded) return out
  return `${out.trimEnd()}\n${BOUNDED_WHITESPACE_RULE} ::= ${allowed}{0,${maxWhitespace}}\n`
}
