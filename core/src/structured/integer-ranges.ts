/**
 * Works around XGrammar 0.1.27's integer ranges: the digit grammar it writes for
 * `{"type": "integer", "minimum": 0, "maximum": 150}` also accepts 151–159 (the last digit of the
 * upper bound is not applied). A bounded integer range of at most `MAX_ENUMERATED` values is
 * rewritten to the equivalent `enum` of its members, which XGrammar matches exactly. Wider
 * ranges are left to XGrammar.
 */

/** Widest range turned into an enum (the grammar grows with the number of members). */
const MAX_ENUMERATED = 2048

type Json = Record<string, unknown>

/** Keywords whose values are data, not schemas: never rewritten. */
const DATA_KEYWORDS = new Set(['enum', 'const', 'default', 'examples'])

function bound(node: Json, inclusive: string, exclusive: string, dir: 1 | -1): number | null {
  let best: number | null = null
  const take = (v: number): void => {
    if (best === null || dir * (v - best) > 0) best = v
  }
  const inc = node[inclusive]
  const exc = node[exclusive]
  if (typeof inc === 'number') take(dir > 0 ? Math.ceil(inc) : Math.floor(inc))
  // Draft 4 wrote exclusiveMinimum: true next to minimum; later drafts give the bound itself.
  if (typeof exc === 'number') take(dir > 0 ? Math.floor(exc) + 1 : Math.ceil(exc) - 1)
  if (exc === true && typeof inc === 'number') best = dir > 0 ? Math.floor(inc) + 1 : Math.ceil(inc) - 1
  return best
}

/** A copy of `schema` with small bounded integer ranges written as enums. */
export function enumerateIntegerRanges(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(enumerateIntegerRanges)
  if (schema === null || typeof schema !== 'object') return schema
  const node = schema as Json
  const out: Json = {}
  for (const [key, value] of Object.entries(node))
    out[key] = DATA_KEYWORDS.has(key) ? value : enumerateIntegerRanges(value)
  if (out.type !== 'integer' || 'enum' in out || 'const' in out || 'multipleOf' in out) return out
  const low = bound(out, 'minimum', 'exclusiveMinimum', 1)
  const high = bound(out, 'maximum', 'exclusiveMaximum', -1)
  if (low === null || high === null || high < low || high - low + 1 > MAX_ENUMERATED) return out
  for (const key of ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum']) delete out[key]
  out.enum = Array.from({ length: high - low + 1 }, (_, i) => low + i)
  return out
}
