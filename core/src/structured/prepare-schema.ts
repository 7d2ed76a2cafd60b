/**
 * Gets a request's JSON schema ready for XGrammar: refuses the keywords XGrammar 0.1.27 would
 * silently ignore or get wrong (so no output ever breaks the schema unnoticed), and takes out the
 * parts whose grammar Loom writes itself, leaving a marker in their place:
 * - numbers and integers with bounds (`minimum`, `maximum`, `exclusiveMinimum`,
 *   `exclusiveMaximum`), whose XGrammar rules admit out-of-range values (decimal-interval-grammar);
 * - strings with a `pattern`, whose XGrammar rules can write a raw `"`, `\` or control character
 *   inside the JSON string (pattern-grammar).
 * Each marker is a `const` string; XGrammar writes it as one literal that `spliceGrammar` swaps
 * for the rule Loom generated.
 */
import { LoomError } from '../errors/index.ts'
import type { NumericInterval } from './decimal-interval-grammar.ts'

type Json = Record<string, unknown>

/** What a marker stands for. */
export type Splice =
  | { readonly kind: 'interval'; readonly interval: NumericInterval }
  | { readonly kind: 'pattern'; readonly pattern: string }

export interface PreparedSchema {
  /** The schema XGrammar compiles, markers in place. */
  readonly schema: unknown
  /** Marker string → what to put there. */
  readonly splices: ReadonlyMap<string, Splice>
}

/** Keywords whose value is one schema. */
const SCHEMA_VALUED = ['items', 'additionalProperties', 'additionalItems', 'not', 'contains', 'propertyNames']
/** Keywords whose value is an array of schemas. */
const SCHEMA_LISTS = ['anyOf', 'allOf', 'oneOf', 'prefixItems']
/** Keywords whose value maps names to schemas. */
const SCHEMA_MAPS = ['properties', '$defs', 'definitions', 'patternProperties', 'dependentSchemas']

/** Keywords a grammar cannot honour (or XGrammar ignores) and why. */
const REFUSED: Readonly<Record<string, string>> = {
  oneOf: 'exactly-one-of cannot be enforced by a grammar (XGrammar treats it as anyOf)',
  not: 'negated schemas cannot be enforced by a grammar',
  if: 'conditional schemas are not supported',
  then: 'conditional schemas are not supported',
  else: 'conditional schemas are not supported',
  multipleOf: 'multiples cannot be enforced by the grammar engine',
  uniqueItems: 'unique array items cannot be enforced by a grammar',
  contains: 'array `contains` is not supported',
  minContains: 'array `contains` is not supported',
  maxContains: 'array `contains` is not supported',
  patternProperties: 'property-name patterns are not supported',
  propertyNames: 'property-name schemas are not supported',
  dependentRequired: 'dependent properties are not supported',
  dependentSchemas: 'dependent schemas are not supported',
  dependencies: 'dependent properties are not supported',
  unevaluatedProperties: 'unevaluated properties are not supported',
  unevaluatedItems: 'unevaluated items are not supported',
}

const BOUND_KEYWORDS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum']
const STRING_LENGTH_KEYWORDS = ['minLength', 'maxLength', 'format']
/** Keywords that may sit next to a bound or pattern without changing which values are valid. */
const ANNOTATIONS = new Set([
  'type',
  'title',
  'description',
  'default',
  'examples',
  '$comment',
  'deprecated',
  'readOnly',
  'writeOnly',
  '$id',
  '$schema',
  '$anchor',
])

function refuse(keyword: string, why: string): never {
  throw new LoomError(
    'grammar_unsupported',
    { detail: `\`${keyword}\` is not supported: ${why}` },
    { param: 'response_format' },
  )
}

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v)

/**
 * Check `schema` and swap bounded numbers and patterned strings for markers. Throws a 422
 * `grammar_unsupported` naming the keyword for anything that cannot be honoured exactly.
 */
export function prepareSchema(schema: unknown): PreparedSchema {
  const text = JSON.stringify(schema) ?? ''
  // A marker must not collide with a string the schema itself contains.
  let tag = 'LOOMSPLICE'
  while (text.includes(tag)) tag += 'X'
  const splices = new Map<string, Splice>()
  const mark = (splice: Splice): Json => {
    const marker = `${tag}${splices.size}`
    splices.set(marker, splice)
    return { const: marker }
  }
  const counted = { properties: 0 }
  const prepared = walk(schema, mark, 0, counted)
  const properties = counted.properties
  if (properties > MAX_SCHEMA_PROPERTIES) {
    refuse(
      'properties',
      `schemas with more than ${MAX_SCHEMA_PROPERTIES} properties in all are not supported (this one has ${properties}): XGrammar compiles on the server's event loop, in time that grows with the square of the property count`,
    )
  }
  return { schema: prepared, splices }
}

/**
 * Most properties (over every object of a schema) accepted. Compiling holds up every other
 * request while it runs (the first time a schema is seen; then it is cached): 64 properties take
 * ~1 s with the demo model's 2k-token vocabulary, 100 took 6 s and 3000 wedged the server.
 */
const MAX_SCHEMA_PROPERTIES = 64

/**
 * Deepest nesting of schemas (an `items` or a property inside another) accepted. XGrammar 0.1.27's
 * WebAssembly build runs out of stack between 50 and 60 levels and reports "memory access out of
 * bounds"; 32 leaves room and is deeper than real response schemas go.
 */
const MAX_SCHEMA_DEPTH = 32

/**
 * Largest `minLength` / `maxLength` accepted. Measured on the demo model: up to 256 a bounded
 * string's mask costs under 0.5 ms a token; from 512 it costs ~17 ms a token, in every step of
 * the batch it shares (a 40-token request beside it took 1.8 s instead of 11 ms).
 */
const MAX_STRING_LENGTH_BOUND = 256

/** `counted.properties` adds up the properties of every object schema walked (the limit's count). */
function walk(node: unknown, mark: (splice: Splice) => Json, depth: number, counted: { properties: number }): unknown {
  if (!isObject(node)) return node
  if (depth > MAX_SCHEMA_DEPTH) {
    refuse('nesting', `schemas nested more than ${MAX_SCHEMA_DEPTH} levels deep are not supported`)
  }
  const nested = (child: unknown) => walk(child, mark, depth + 1, counted)
  if (isObject(node.properties)) {
    counted.properties += Object.keys(node.properties).length
    // XGrammar 0.1.27 writes the name unescaped into an EBNF string literal and then fails to read
    // it back ("EBNF lexer error ... Expect \" in string literal"); a tab survives.
    const bad = Object.keys(node.properties).find((name) => /[\u0000-\u0008\u000a-\u001f"]/.test(name))
    if (bad !== undefined) {
      refuse('properties', `property names with \`"\` or control characters (${JSON.stringify(bad)}) are not supported`)
    }
  }
  for (const keyword of Object.keys(node)) {
    const why = REFUSED[keyword]
    if (why !== undefined && !(keyword === 'uniqueItems' && node[keyword] === false)) refuse(keyword, why)
  }
  if (Array.isArray(node.allOf) && node.allOf.length > 1) {
    refuse('allOf', 'XGrammar supports allOf with a single schema only')
  }
  if (node.format === 'email' || node.format === 'idn-email') {
    refuse('format', 'the `email` format can produce invalid JSON escapes')
  }
  if (node.format === 'date' || node.format === 'date-time' || node.format === 'time') {
    refuse(
      'format',
      `\`${node.format}\` is checked by shape only (XGrammar lets June 31 and minute 60 through); use a string \`pattern\` and check the value after parsing`,
    )
  }
  if (typeof node.$ref === 'string' && !node.$ref.startsWith('#')) {
    refuse('$ref', `only references inside the schema (\`#...\`) are supported, not ${JSON.stringify(node.$ref)}`)
  }
  for (const keyword of BOUND_KEYWORDS) {
    if (keyword in node && (typeof node[keyword] !== 'number' || !Number.isFinite(node[keyword]))) {
      refuse(keyword, `it must be a finite number, not ${JSON.stringify(node[keyword])}`)
    }
  }
  if (Array.isArray(node.enum) && node.enum.length === 0) refuse('enum', 'an empty enum admits no value')
  for (const keyword of ['minLength', 'maxLength']) {
    if (typeof node[keyword] === 'number' && (node[keyword] as number) > MAX_STRING_LENGTH_BOUND) {
      refuse(
        keyword,
        `values above ${MAX_STRING_LENGTH_BOUND} are not supported: XGrammar's token mask for longer bounded strings takes ~17 ms per token, which slows every request in the batch (an unbounded string is fast)`,
      )
    }
  }
  if ('enum' in node || 'const' in node) {
    // XGrammar writes the listed values and ignores the other keywords: a listed value they
    // exclude would come out. Fine when every listed value passes them.
    const values = 'const' in node ? [node.const] : Array.isArray(node.enum) ? node.enum : []
    const excluded = values.find((value) => failsNarrowing(node, value))
    if (excluded !== undefined) {
      refuse(
        'enum' in node ? 'enum' : 'const',
        `${JSON.stringify(excluded)} is listed but excluded by the schema's other keywords: list only the allowed values`,
      )
    }
  }
  const out: Json = {}
  for (const [key, value] of Object.entries(node)) {
    if (SCHEMA_VALUED.includes(key)) out[key] = nested(value)
    else if (SCHEMA_LISTS.includes(key) && Array.isArray(value)) out[key] = value.map(nested)
    else if (key === 'items' && Array.isArray(value)) out[key] = value.map(nested)
    else if (SCHEMA_MAPS.includes(key) && isObject(value))
      out[key] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, nested(v)]))
    else out[key] = value
  }
  return rewriteLeaf(out, mark)
}

/** Whether `value` breaks a bound, length or pattern of `node` (keywords of other types do not apply). */
function failsNarrowing(node: Json, value: unknown): boolean {
  if (typeof value === 'number') {
    const n = (k: string) => (typeof node[k] === 'number' ? (node[k] as number) : undefined)
    const [min, max, xmin, xmax] = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'].map(n)
    return (
      (min !== undefined && value < min) ||
      (max !== undefined && value > max) ||
      (xmin !== undefined && value <= xmin) ||
      (xmax !== undefined && value >= xmax)
    )
  }
  if (typeof value === 'string') {
    const length = [...value].length
    if (typeof node.minLength === 'number' && length < node.minLength) return true
    if (typeof node.maxLength === 'number' && length > node.maxLength) return true
    if (typeof node.pattern === 'string') {
      try {
        return !new RegExp(node.pattern, 'u').test(value)
      } catch {
        return true
      }
    }
  }
  return false
}

/** Swap a bounded number or a patterned string for a marker; other nodes are returned as they are. */
function rewriteLeaf(node: Json, mark: (splice: Splice) => Json): Json {
  const hasBounds = BOUND_KEYWORDS.some((k) => k in node)
  const hasPattern = 'pattern' in node
  if ((!hasBounds && !hasPattern) || 'enum' in node || 'const' in node) return node
  const types = node.type === undefined ? null : Array.isArray(node.type) ? node.type : [node.type]
  if (types !== null && types.length > 1) {
    // Each type's keywords apply to values of that type only: one branch per type is the same set.
    if ('anyOf' in node) refuse('type', 'a list of types next to `anyOf` and bounds or a pattern')
    return { anyOf: types.map((type) => rewriteLeaf({ ...node, type }, mark)) }
  }
  const type = types?.[0]
  if (hasBounds && (type === 'number' || type === 'integer')) return markInterval(node, type === 'integer', mark)
  if (hasPattern && (type === 'string' || type === undefined)) return markPattern(node, mark)
  if (hasBounds && type === undefined) refuse('minimum/maximum', 'bounds need `type: "number"` or `"integer"`')
  return node
}

function checkAlone(node: Json, handled: readonly string[], what: string): void {
  for (const key of Object.keys(node)) {
    if (!handled.includes(key) && !ANNOTATIONS.has(key)) refuse(key, `not supported next to ${what}`)
  }
}

function markInterval(node: Json, integer: boolean, mark: (splice: Splice) => Json): Json {
  checkAlone(node, BOUND_KEYWORDS, 'minimum/maximum')
  const numberAt = (key: string): number | undefined => {
    const v = node[key]
    if (v === undefined || typeof v === 'boolean') return undefined
    if (typeof v !== 'number' || !Number.isFinite(v)) refuse(key, 'it must be a finite number')
    return v
  }
  const min = numberAt('minimum')
  const max = numberAt('maximum')
  // Draft 4 wrote `exclusiveMinimum: true` next to `minimum`; later drafts give the bound itself.
  const exMin = node.exclusiveMinimum === true ? min : numberAt('exclusiveMinimum')
  const exMax = node.exclusiveMaximum === true ? max : numberAt('exclusiveMaximum')
  const lower = tighter(min, exMin, node.exclusiveMinimum === true, 1)
  const upper = tighter(max, exMax, node.exclusiveMaximum === true, -1)
  const interval: NumericInterval = {
    integer,
    ...(lower === undefined ? {} : { min: lower }),
    ...(upper === undefined ? {} : { max: upper }),
  }
  return mark({ kind: 'interval', interval })
}

/** The tighter of an inclusive and an exclusive bound (`dir` 1: lower bound, -1: upper). */
function tighter(
  inclusive: number | undefined,
  exclusive: number | undefined,
  draft4: boolean,
  dir: 1 | -1,
): { value: number; exclusive: boolean } | undefined {
  if (draft4 && exclusive !== undefined) return { value: exclusive, exclusive: true }
  if (exclusive === undefined) return inclusive === undefined ? undefined : { value: inclusive, exclusive: false }
  if (inclusive === undefined || dir * (exclusive - inclusive) >= 0) return { value: exclusive, exclusive: true }
  return { value: inclusive, exclusive: false }
}

function markPattern(node: Json, mark: (splice: Splice) => Json): Json {
  if (typeof node.pattern !== 'string') refuse('pattern', 'it must be a string')
  for (const key of STRING_LENGTH_KEYWORDS) {
    if (key in node) refuse(key, 'not supported together with `pattern` (XGrammar would ignore it)')
  }
  checkAlone(node, ['pattern'], '`pattern`')
  return mark({ kind: 'pattern', pattern: node.pattern })
}
