/**
 * The cache key of a JSON schema: JSON text with object keys sorted, except the names under
 * `properties`, whose order is the order XGrammar makes the model write them in (two schemas that
 * list properties differently compile to different grammars).
 */
export function canonicalSchemaJson(value: unknown): string {
  return serialize(value, false)
}

function serialize(value: unknown, keepOrder: boolean): string {
  if (Array.isArray(value)) return `[${value.map((v) => serialize(v, false)).join(',')}]`
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null'
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined)
  if (!keepOrder) entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  // Written by hand: JSON.stringify would move integer-like keys ("1", "2") to the front.
  const body = entries.map(([k, v]) => `${JSON.stringify(k)}:${serialize(v, k === 'properties' && !keepOrder)}`)
  return `{${body.join(',')}}`
}
