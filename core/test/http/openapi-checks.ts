import { Ajv2020, type ErrorObject } from 'ajv/dist/2020.js'

/** The parts of Loom's OpenAPI document the tests read. */
export interface MediaType {
  readonly schema?: unknown
  readonly example?: unknown
  readonly examples?: Readonly<Record<string, { readonly value?: unknown }>>
  /** Loom's extension on `text/event-stream`: the schema of each event's `data:` JSON. */
  readonly 'x-sse-data-schema'?: unknown
}
export interface Operation {
  readonly operationId?: string
  readonly requestBody?: { readonly content: Readonly<Record<string, MediaType>> }
  readonly responses: Readonly<Record<string, { readonly content?: Readonly<Record<string, MediaType>> }>>
}
export interface OpenApiDocument {
  readonly openapi: string
  readonly paths: Readonly<Record<string, Readonly<Record<string, Operation>>>>
  readonly components: { readonly schemas: Readonly<Record<string, unknown>> }
}

/** Every media type of every request body and response, named for messages. */
export function* mediaTypes(doc: OpenApiDocument): Iterable<{ where: string; type: string; media: MediaType }> {
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      for (const [type, media] of Object.entries(op.requestBody?.content ?? {})) {
        yield { where: `${method.toUpperCase()} ${path} request`, type, media }
      }
      for (const [status, response] of Object.entries(op.responses)) {
        for (const [type, media] of Object.entries(response.content ?? {})) {
          yield { where: `${method.toUpperCase()} ${path} ${status}`, type, media }
        }
      }
    }
  }
}

/** The `data:` payloads of a server-sent-events text, in order. */
export function sseData(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice('data:'.length).trimStart())
}

const COMPONENTS_ID = 'loom:components'

/** Point `#/components/schemas/X` references at the components registered with ajv. */
function rebase(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(rebase)
  if (typeof value !== 'object' || value === null) return value
  return Object.fromEntries(
    Object.entries(value).map(([key, v]) => [
      key,
      key === '$ref' && typeof v === 'string'
        ? v.replace('#/components/schemas/', `${COMPONENTS_ID}#/$defs/`)
        : rebase(v),
    ]),
  )
}

/**
 * Validators of values against the document's schemas (JSON Schema 2020-12, as OpenAPI 3.1 embeds
 * it), in ajv's strict mode so that a misspelled keyword in a schema fails too.
 */
export class DocumentSchemas {
  readonly #ajv = new Ajv2020({ allErrors: true, strict: true })

  constructor(doc: OpenApiDocument) {
    this.#ajv.addSchema({ $id: COMPONENTS_ID, $defs: rebase(doc.components.schemas) as object })
  }

  /** Null when `value` is valid, else ajv's errors as text. */
  check(schema: unknown, value: unknown): string | null {
    const validate = this.#ajv.compile(rebase(schema) as object)
    return validate(value) ? null : this.#ajv.errorsText(validate.errors as ErrorObject[])
  }

  /** Null when `schema` is a valid JSON Schema 2020-12, else what is wrong. */
  metaCheck(schema: unknown): string | null {
    return this.#ajv.validateSchema(schema as object) ? null : this.#ajv.errorsText(this.#ajv.errors)
  }
}

/** Every `$ref` in `value` (the document), for checking that each one resolves. */
export function* references(value: unknown): Iterable<string> {
  if (Array.isArray(value)) for (const v of value) yield* references(v)
  else if (typeof value === 'object' && value !== null) {
    for (const [key, v] of Object.entries(value)) {
      if (key === '$ref' && typeof v === 'string') yield v
      else yield* references(v)
    }
  }
}

/** The value at a local JSON pointer (`#/components/schemas/Token`), or undefined. */
export function resolvePointer(doc: unknown, pointer: string): unknown {
  if (!pointer.startsWith('#/')) return undefined
  let at: unknown = doc
  for (const part of pointer.slice(2).split('/')) {
    const key = decodeURIComponent(part).replace(/~1/g, '/').replace(/~0/g, '~')
    if (typeof at !== 'object' || at === null || !Object.hasOwn(at, key)) return undefined
    at = (at as Record<string, unknown>)[key]
  }
  return at
}

/**
 * The routes fastify serves, as `METHOD /path`, read from `printRoutes({ commonPrefix: false })`:
 * a tree whose nodes hold path segments, the full path being the segments from the root down.
 */
export function servedRoutes(tree: string): string[] {
  const routes: string[] = []
  const stack: string[] = []
  for (const line of tree.split('\n')) {
    const match = /^([│ ]*)(?:├── |└── )(.+?)(?: \(([A-Z, ]+)\))?$/u.exec(line)
    if (!match) continue
    const depth = match[1]!.length / 4
    stack.length = depth
    // A wildcard prints as its own node, `*`, under the static path before its slash.
    const segment = match[2]!
    stack.push(segment.startsWith('*') && !stack.join('').endsWith('/') ? `/${segment}` : segment)
    for (const method of (match[3] ?? '').split(', ').filter(Boolean)) routes.push(`${method} ${stack.join('')}`)
  }
  return routes
}
