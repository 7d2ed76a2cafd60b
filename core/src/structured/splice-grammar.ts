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
  let out = ''
  let i = 0
  while (i < ebnf.length) {
    const ch = ebnf[i]!
    if (ch === '"' || ch === '[') {
      const close = ch === '"' ? '"' : ']'
      let j = i + 1
      while (j < ebnf.length && ebnf[j] !== close) j += ebnf[j] === '\\' ? 2 : 1
      const token = ebnf.slice(i, j + 1)
      const marker = ch === '"' ? /^"\\"(\w+)\\""$/.exec(token)?.[1] : undefined
      const replacement = marker === undefined ? undefined : replacements.get(marker)
      if (replacement !== undefined) {
        used.add(marker!)
        out += replacement.root
      } else {
        out += token
      }
      i = j + 1
    } else {
      out += ch
      i++
    }
  }
  for (const marker of replacements.keys()) {
    if (out.includes(marker)) throw new Error(`structured output: marker ${marker} left in the grammar`)
  }
  const rules = [...replacements].filter(([marker]) => used.has(marker)).flatMap(([, r]) => r.rules)
  return rules.length === 0 ? out : `${out.trimEnd()}\n${rules.join('\n')}\n`
}
