/**
 * The grammar of one `pattern` string, taken from what XGrammar writes for the schema
 * `{"type": "string", "pattern": P}` and made safe for JSON (json-string-chars): its rules are
 * renamed under a prefix so they can join another grammar, and every literal and character class
 * inside the string is rewritten. XGrammar's own text for a pattern is only trusted in the shape it
 * has been seen in: `string ::= (("\"" BODY "\""))` with a balanced BODY; anything else (a
 * top-level `|` in the regex makes XGrammar write the quotes into the alternatives) is refused.
 */
import { ebnfTokenEnd } from './ebnf-tokens.ts'
import { escapeLiteralForJsonString, narrowClassForJsonString } from './json-string-chars.ts'

/** Rules for one pattern: `root` matches the whole JSON string, quotes included. */
export interface PatternGrammar {
  readonly root: string
  readonly rules: string[]
}

/** Why a pattern's grammar cannot be used; the caller turns it into `grammar_unsupported`. */
export class PatternUnsupportedError extends Error {}

type Token = { kind: 'literal' | 'class' | 'name' | 'open' | 'close' | 'other'; text: string }

/** Splits an EBNF rule body into tokens (literals, classes, names, parentheses, single other characters). */
function tokenize(body: string): Token[] {
  const tokens: Token[] = []
  let i = 0
  while (i < body.length) {
    const ch = body[i]!
    if (ch === '"' || ch === '[') {
      const j = ebnfTokenEnd(body, i)
      if (j >= body.length) throw new PatternUnsupportedError('unterminated literal in the pattern grammar')
      tokens.push({ kind: ch === '"' ? 'literal' : 'class', text: body.slice(i, j + 1) })
      i = j + 1
    } else if (/[A-Za-z_]/.test(ch)) {
      const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(body.slice(i))![0]
      tokens.push({ kind: 'name', text: name })
      i += name.length
    } else if (ch === '(' || ch === ')') {
      tokens.push({ kind: ch === '(' ? 'open' : 'close', text: ch })
      i++
    } else {
      tokens.push({ kind: 'other', text: ch })
      i++
    }
  }
  return tokens
}

/** Rule name → body, from XGrammar's printed grammar (one rule per line). */
function parseRules(ebnf: string): Map<string, string> {
  const rules = new Map<string, string>()
  for (const line of ebnf.split('\n')) {
    const match = /^([A-Za-z_][A-Za-z0-9_]*) ::= (.*)$/.exec(line.trim())
    if (match !== null) rules.set(match[1]!, match[2]!)
  }
  return rules
}

/** The rule `root` stands for when it is just `((name))`. */
function aliasOf(body: string | undefined): string | null {
  return body === undefined ? null : (/^\(\(([A-Za-z_][A-Za-z0-9_]*)\)\)$/.exec(body)?.[1] ?? null)
}

const QUOTE = '"\\""'

/**
 * Rewrite `tokens` for use inside a JSON string under `prefix`, collecting the rule names they
 * reference into `referenced`.
 */
function rewrite(tokens: Token[], prefix: string, referenced: Set<string>): string {
  const parts: string[] = []
  for (const token of tokens) {
    switch (token.kind) {
      case 'literal':
        parts.push(escapeLiteralForJsonString(token.text))
        break
      case 'class': {
        const narrowed = narrowClassForJsonString(token.text)
        if (narrowed === null)
          throw new PatternUnsupportedError('a character class only matches characters JSON escapes')
        parts.push(narrowed)
        break
      }
      case 'name':
        referenced.add(token.text)
        parts.push(`${prefix}_${token.text}`)
        break
      default:
        parts.push(token.text)
    }
  }
  return parts.join('')
}

/**
 * Rules (named `${prefix}_…`) for the JSON string of a pattern, from `ebnf`, the grammar XGrammar
 * printed for `{"type": "string", "pattern": …}`.
 */
export function patternGrammar(prefix: string, ebnf: string): PatternGrammar {
  const rules = parseRules(ebnf)
  const stringRule = aliasOf(rules.get('root'))
  const body = stringRule === null ? undefined : rules.get(stringRule)
  const open = `((${QUOTE} `
  const close = ` ${QUOTE}))`
  if (body === undefined || !body.startsWith(open) || !body.endsWith(close)) {
    throw new PatternUnsupportedError('the grammar engine wrote it in an unexpected shape (a top-level `|`?)')
  }
  const inner = tokenize(body.slice(open.length, -close.length))
  let depth = 0
  for (const token of inner) {
    depth += token.kind === 'open' ? 1 : token.kind === 'close' ? -1 : 0
    if (depth < 0) throw new PatternUnsupportedError('the grammar engine split the string (a top-level `|`?)')
  }
  if (depth !== 0) throw new PatternUnsupportedError('unbalanced pattern grammar')

  const out: string[] = []
  const referenced = new Set<string>()
  const root = `${prefix}_root`
  out.push(`${root} ::= (${QUOTE} ${rewrite(inner, prefix, referenced)} ${QUOTE})`)
  // Every rule the body reaches lies inside the string too.
  const done = new Set<string>()
  for (let pending = [...referenced]; pending.length > 0; pending = [...referenced].filter((n) => !done.has(n))) {
    for (const name of pending) {
      done.add(name)
      const ruleBody = rules.get(name)
      if (ruleBody === undefined || name.startsWith('basic_')) {
        throw new PatternUnsupportedError(`the pattern grammar refers to \`${name}\``)
      }
      // A lookahead `(=…)` in a rule would be rewritten like string content; none is expected.
      if (ruleBody.includes('(=')) throw new PatternUnsupportedError('lookahead in the pattern grammar')
      out.push(`${prefix}_${name} ::= ${rewrite(tokenize(ruleBody), prefix, referenced)}`)
    }
  }
  return { root, rules: out }
}
