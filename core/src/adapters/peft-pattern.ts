/**
 * PEFT's per-module overrides (`rank_pattern`, `alpha_pattern`): a key applies to a module when it
 * equals the module's name or, read as a regular expression, matches a dot-separated suffix of it
 * (`q_proj`, `layers.0.self_attn.q_proj`, `model.layers.(0|1).mlp.up_proj`). Exact keys win, then
 * the first matching key in insertion order, as in `peft.utils.other.get_pattern_key`.
 */
export function findPatternKey(patternKeys: readonly string[], moduleName: string): string | null {
  for (const key of patternKeys) if (key === moduleName) return key
  for (const key of patternKeys) {
    let re: RegExp
    try {
      re = new RegExp(`^(?:.*\\.)?(?:${key})$`)
    } catch {
      continue // a key that is not a valid regex can only match exactly (checked above)
    }
    if (re.test(moduleName)) return key
  }
  return null
}
