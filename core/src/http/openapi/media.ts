import { ref, type JsonSchema, type NamedExample } from './json-schema.ts'

/**
 * Builders of the request and response entries of a `RouteDoc`, in the forms @fastify/swagger
 * turns into OpenAPI request bodies and responses.
 */

type Examples = Readonly<Record<string, NamedExample>>

/**
 * A JSON request body of component `schema`; swagger moves `x-examples` to the media type. (The
 * `allOf` keeps them: swagger drops every sibling of a bare `$ref`.)
 */
export function jsonBody(schema: string, examples: Examples): JsonSchema {
  return { allOf: [ref(schema)], 'x-examples': examples }
}

/** A response header, documented with its meaning. */
export interface HeaderDoc {
  readonly description: string
  readonly type?: 'string' | 'integer'
}

/** Every answer carries the request id (the client's `x-request-id` when short and plain). */
export const REQUEST_ID_HEADER: Readonly<Record<string, HeaderDoc>> = {
  'x-request-id': { description: "The request's id, as the server logs it." },
}

/** A JSON body: a component's name or an inline schema, with named examples. */
export function jsonContent(schema: string | JsonSchema, examples: Examples): Record<string, JsonSchema> {
  return { 'application/json': { schema: typeof schema === 'string' ? ref(schema) : schema, examples } }
}

/**
 * A server-sent-events body. OpenAPI 3.1 has no schema for an event stream's items (3.2 adds
 * `itemSchema`), so the stream is a string and `x-sse-data-schema` gives the schema of each
 * event's `data:` JSON; `[DONE]`, where the description names it, is the literal OpenAI ends with.
 */
export function sseContent(dataSchema: JsonSchema, example: string): Record<string, JsonSchema> {
  return {
    'text/event-stream': {
      schema: { type: 'string', description: 'Server-sent events, one `data:` line each.' },
      example,
      'x-sse-data-schema': dataSchema,
    },
  }
}

/** A response: its bodies by media type, and its headers (`x-request-id` always). */
export function response(
  description: string,
  content: Record<string, JsonSchema> | null,
  headers: Readonly<Record<string, HeaderDoc>> = {},
): JsonSchema {
  const all = { ...REQUEST_ID_HEADER, ...headers }
  return {
    description,
    headers: Object.fromEntries(
      Object.entries(all).map(([name, h]) => [name, { type: h.type ?? 'string', description: h.description }]),
    ),
    // swagger leaves the body out of a response typed `null` (no content: `/health`'s 200).
    ...(content === null ? { type: 'null' } : { content }),
  }
}
