/** A JSON Schema (2020-12, as OpenAPI 3.1 embeds it), written as a plain object literal. */
export type JsonSchema = Readonly<Record<string, unknown>>

/** The path of a named schema in the document's `components.schemas`. */
export function ref(name: string): JsonSchema {
  return { $ref: `#/components/schemas/${name}` }
}

/**
 * `schema` that also accepts `null`: Loom's parsers read a `null` field as an absent one, so every
 * optional request field is nullable.
 */
export function nullable(schema: JsonSchema): JsonSchema {
  const type = schema.type
  if (typeof type !== 'string' && !Array.isArray(type)) return { anyOf: [schema, { type: 'null' }] }
  const withNull = { ...schema, type: [...(Array.isArray(type) ? (type as string[]) : [type]), 'null'] }
  return Array.isArray(schema.enum) ? { ...withNull, enum: [...(schema.enum as unknown[]), null] } : withNull
}

/** A named example as a Media Type Object lists it (`examples: {name: {summary, value}}`). */
export interface NamedExample {
  readonly summary: string
  readonly value: unknown
}
