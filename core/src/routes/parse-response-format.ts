import type { JsonWhitespace, ResponseFormat } from '../contracts/grammar.ts'
import { fieldError } from '../errors/index.ts'
import { expectObject, optionalBoolean, optionalString } from '../validation/fields.ts'

/** OpenAI's rule for `json_schema.name`. */
const SCHEMA_NAME = /^[a-zA-Z0-9_-]{1,64}$/

/** The schema's name: optional here (LoRAX clients omit it), but held to OpenAI's rule when sent. */
function schemaName(spec: Readonly<Record<string, unknown>>, path: string): string {
  const name = optionalString(spec, 'name', path)
  if (name === undefined) return 'schema'
  if (!SCHEMA_NAME.test(name)) {
    throw fieldError(path, 'must be 1 to 64 characters from a-z, A-Z, 0-9, "_" and "-"', name)
  }
  return name
}

const WHITESPACE: readonly JsonWhitespace[] = ['compact', 'flexible']

/**
 * `response_format.whitespace` (a Loom extension): `compact` or `flexible` whitespace between JSON
 * tokens for this request; absent, the server's `structured_output.json_whitespace` applies.
 */
function whitespaceOf(body: Readonly<Record<string, unknown>>, path: string): { whitespace?: JsonWhitespace } {
  const value = optionalString(body, 'whitespace', path)
  if (value === undefined) return {}
  if (!(WHITESPACE as readonly string[]).includes(value)) {
    throw fieldError(path, 'must be one of "compact", "flexible"', value)
  }
  return { whitespace: value as JsonWhitespace }
}

/**
 * `response_format` as both API families send it: `{type: "text"}` (no constraint),
 * `{type: "json_object", schema?}` (LoRAX's extension keeps `schema`), or
 * `{type: "json_schema", json_schema: {name, schema, strict}}` (OpenAI). LoRAX's native form
 * `{type: "json_schema", schema}` is accepted too. Each JSON form may add `whitespace`.
 */
export function parseResponseFormat(raw: unknown, path: string): ResponseFormat | null {
  if (raw === undefined || raw === null) return null
  const body = expectObject(raw, path)
  const type = optionalString(body, 'type', `${path}.type`)
  const format = parseFormat(body, type, path)
  return format === null ? null : { ...format, ...whitespaceOf(body, `${path}.whitespace`) }
}

/** The format `type` names, without the whitespace choice. */
function parseFormat(
  body: Readonly<Record<string, unknown>>,
  type: string | undefined,
  path: string,
): ResponseFormat | null {
  switch (type) {
    case 'text':
      return null
    case 'json_object':
      return body.schema === undefined || body.schema === null
        ? { type: 'json_object' }
        : { type: 'json_object', schema: expectObject(body.schema, `${path}.schema`) }
    case 'json_schema': {
      if (body.json_schema === undefined && body.schema !== undefined) {
        return {
          type: 'json_schema',
          name: 'schema',
          schema: expectObject(body.schema, `${path}.schema`),
          strict: true,
        }
      }
      const spec = expectObject(body.json_schema, `${path}.json_schema`)
      const name = schemaName(spec, `${path}.json_schema.name`)
      const schema = spec.schema === undefined ? {} : expectObject(spec.schema, `${path}.json_schema.schema`)
      const strict = optionalBoolean(spec, 'strict', `${path}.json_schema.strict`) ?? false
      return { type: 'json_schema', name, schema, strict }
    }
    default:
      throw fieldError(`${path}.type`, 'must be one of "text", "json_object", "json_schema"', type)
  }
}
