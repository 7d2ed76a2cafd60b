import type { ResponseFormat } from '../contracts/grammar.ts'
import { fieldError } from '../errors/index.ts'
import { expectObject, optionalBoolean, optionalString } from '../validation/fields.ts'

/**
 * `response_format` as both API families send it: `{type: "text"}` (no constraint),
 * `{type: "json_object", schema?}` (LoRAX's extension keeps `schema`), or
 * `{type: "json_schema", json_schema: {name, schema, strict}}` (OpenAI). LoRAX's native form
 * `{type: "json_schema", schema}` is accepted too.
 */
export function parseResponseFormat(raw: unknown, path: string): ResponseFormat | null {
  if (raw === undefined || raw === null) return null
  const body = expectObject(raw, path)
  const type = optionalString(body, 'type', `${path}.type`)
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
      const name = optionalString(spec, 'name', `${path}.json_schema.name`) ?? 'schema'
      const schema = spec.schema === undefined ? {} : expectObject(spec.schema, `${path}.json_schema.schema`)
      const strict = optionalBoolean(spec, 'strict', `${path}.json_schema.strict`) ?? false
      return { type: 'json_schema', name, schema, strict }
    }
    default:
      throw fieldError(`${path}.type`, 'must be one of "text", "json_object", "json_schema"', type)
  }
}
