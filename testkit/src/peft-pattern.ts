/**
 * PEFT's `rank_pattern` / `alpha_pattern` lookup: a key matches a module when it equals the
 * module's name or, read as a regular expression, matches a dot-separated suffix of it
 * (`q_proj`, `layers.0.self_attn.q_proj`, `model.layers.(0|1).mlp.up_proj`). The first key in
 * insertion order wins, as in `peft.utils.other.get_pattern_key`.
 */
export function findPatternKey(patternKeys: readonly string[], moduleName: string): string | null {
  for (const key of patternKeys) if (key === moduleName) return key
  for (const key of patternKeys) {
    let re: RegExp
    try {
      re = new RegExp(`^(?:.*\\.)?(?:${key})$`)
    } catch {
      continue
    }
    if (re.test(moduleName)) return key
  }
  return null
}

/** The PEFT name of a projection in the base model, e.g. `model.layers.3.self_attn.q_proj`. */
export function peftModuleName(layer: number, module: string): string {
  const block = ['gate_proj', 'up_proj', 'down_proj'].includes(module) ? 'mlp' : 'self_attn'
  return `model.layers.${layer}.${block}.${module}`
}
