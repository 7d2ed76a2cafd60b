import { mapEbnfTokens } from './ebnf-tokens.ts'

/**
 * Puts the rules Loom generated into the grammar XGrammar wrote for a prepared schema: every
 * marker literal (`"\"LOOMSPLICE3\""`, the JSON text of the marker `const`) becomes a reference to
 * the rule that replaces it, and the generated rules are appended.
 */

/** What replaces one marker: the rule to reference and the rules defining it. */
export interface SplicedRules {
  readonly root: string
  readonly rules: readonly string[]
}

/**
 * `ebnf` with each marker of `replacements` swapped for its rule. Throws when a marker appears in
 * any other form than its own literal (XGrammar merged it with neighbouring text): the grammar
 * would otherwise write the marker into the output.
 */
export function spliceGrammar(ebnf: string, replacements: ReadonlyMap<string, SplicedRules>): string {
  if (replacements.size === 0) return ebnf
  const used = new Set<string>()
  const out = mapEbnfTokens(ebnf, (token, kind) => {
    const marker = kind === 'literal' ? /^"\\"(\w+)\\""$/.exec(token)?.[1] : undefined
    const replacement = marker === undefined ? undefined : replacements.get(marker)
    if (replacement === undefined) return token
    used.add(marker!)
    return replacement.root
  })
  for (const marker of replacements.keys()) {
    if (out.includes(marker)) throw new Error(`structured output: marker ${marker} left in the grammar`)
  }
  const rules = [...replacements].filter(([marker]) => used.has(marker)).flatMap(([, r]) => r.rules)
  return rules.length === 0 ? out : `${out.trimEnd()}\n${rules.join('\n')}\n`
}
