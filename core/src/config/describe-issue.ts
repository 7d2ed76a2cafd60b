import type { z } from 'zod'
import { describeValue } from '../errors/index.ts'
import { closestKey } from './closest-key.ts'
import { formatKeyPath, valueAt, type KeyPath } from './issue-path.ts'
import { looksLikeSecretKey } from './secret-keys.ts'
import { VALUE_NOT_SHOWN, maskCredentials, showConfigValue } from './shown-value.ts'

/**
 * Turns a zod issue into the three parts of a Loom configuration error: which key, what was
 * expected, what was found. Shared by the config loader (`config_invalid`) and the plugin loader
 * (`plugin_options_invalid`), so a plugin's options read exactly like the core's own keys.
 */
export interface IssueDescription {
  /** Rendered key path (`limits.max_batch_size`, `plugins[0].options.base_url`). */
  readonly path: string
  /** Predicate phrase: `must be a number`, `is required`, `is not a known key (did you mean …)`. */
  readonly expected: string
  /**
   * What the file holds there, JSON-rendered and cut short; never the value of a `${VAR}`, nor of
   * a key that looks like a credential (`(value not shown)`), nor a URL's userinfo.
   */
  readonly received: string
}

export interface DescribeOptions {
  /** The value that was validated, to report what was found. */
  readonly input: unknown
  /** The schema it was validated with, to list the keys an object knows. */
  readonly schema: z.ZodType
  /** Prepended to every path (`plugins[1].options`). */
  readonly prefix?: string
  /**
   * Rendered paths whose string came from `${VAR}` substitution, with the variable names. Their
   * value is never echoed (it may be a secret); the message names the variable instead.
   */
  readonly substituted?: ReadonlyMap<string, readonly string[]>
}

type Issue = z.core.$ZodIssue

/** The first issue, described. zod reports issues in schema order, which is stable across runs. */
export function describeFirstIssue(error: z.ZodError, options: DescribeOptions): IssueDescription {
  // A misspelt key (`dirr:`) also leaves the key it meant missing; Zod reports the missing key
  // first, so when an unknown key sits in the same object, report that one (with its "did you
  // mean") instead.
  const first = error.issues[0]
  const missing = first?.code === 'invalid_type' && valueAt(options.input, first.path) === undefined
  const parent = first?.path.slice(0, -1).join('\0')
  const misspelt = missing
    ? error.issues.find((i) => i.code === 'unrecognized_keys' && i.path.join('\0') === parent)
    : undefined
  const issue = misspelt ?? first
  if (issue === undefined) return { path: formatKeyPath([], options.prefix), expected: 'is invalid', received: '' }
  return describeIssue(issue, options)
}

export function describeIssue(issue: Issue, options: DescribeOptions): IssueDescription {
  let path: KeyPath = issue.path
  let expected: string
  // An unknown key whose closest known key is a credential is probably that credential, misspelt.
  let hidden = false
  switch (issue.code) {
    case 'unrecognized_keys': {
      // One issue lists every unknown key of an object; report the first, with a suggestion.
      const key = issue.keys[0] ?? ''
      const known = objectKeysAt(options.schema, issue.path).filter((k) => !issue.keys.includes(k))
      path = [...issue.path, key]
      const suggestion = closestKey(key, known)
      hidden = suggestion !== null && looksLikeSecretKey(suggestion)
      expected =
        suggestion !== null
          ? `is not a known key (did you mean \`${suggestion}\`?)`
          : known.length > 0
            ? `is not a known key (known keys: ${known.map((k) => `\`${k}\``).join(', ')})`
            : 'is not a known key'
      break
    }
    case 'invalid_type':
      expected =
        valueAt(options.input, issue.path) === undefined ? 'is required' : `must be ${typeName(issue.expected)}`
      break
    case 'too_small':
      expected = boundPhrase('small', issue.origin, Number(issue.minimum), issue.inclusive ?? true)
      break
    case 'too_big':
      expected = boundPhrase('big', issue.origin, Number(issue.maximum), issue.inclusive ?? true)
      break
    case 'invalid_value':
      expected =
        issue.values.length === 1
          ? `must be ${describeValue(issue.values[0])}`
          : `must be one of ${issue.values.map((v) => `\`${String(v)}\``).join(', ')}`
      break
    case 'invalid_format':
      expected = `must be a valid ${issue.format === 'url' ? 'URL' : issue.format}`
      break
    case 'not_multiple_of':
      expected = `must be a multiple of ${String(issue.divisor)}`
      break
    case 'invalid_union':
      expected = 'does not match any of the accepted forms'
      break
    default:
      // custom refinements and rarer codes: their message is the best description available
      // (a plugin's own message may quote the value, so credentials in it are masked).
      expected = `is invalid: ${maskCredentials(issue.message)}`
  }
  const rendered = formatKeyPath(path, options.prefix)
  const received = hidden ? VALUE_NOT_SHOWN : describeReceived(rendered, path, options)
  return { path: rendered, expected, received }
}

/**
 * The value found, unless it is (or contains) a substituted `${VAR}`: then only the variable's
 * name. Otherwise what `showConfigValue` allows: nothing of a credential.
 */
function describeReceived(rendered: string, path: KeyPath, options: DescribeOptions): string {
  const exact = options.substituted?.get(rendered)
  const list = (names: readonly string[]): string => [...new Set(names)].map((name) => `\${${name}}`).join(', ')
  if (exact !== undefined) return `the value of ${list(exact)}`
  const nested = [...(options.substituted ?? [])]
    .filter(([key]) => key.startsWith(`${rendered}.`) || key.startsWith(`${rendered}[`))
    .flatMap(([, names]) => names)
  if (nested.length > 0) return `a value that uses ${list(nested)}`
  return showConfigValue(valueAt(options.input, path), path)
}

function typeName(expected: string): string {
  switch (expected) {
    case 'number':
      return 'a number'
    case 'int':
      return 'an integer'
    case 'string':
      return 'a string'
    case 'boolean':
      return 'true or false'
    case 'array':
      return 'a list'
    case 'object':
    case 'record':
    case 'map':
      return 'a mapping'
    default:
      return `of type ${expected}`
  }
}

function boundPhrase(side: 'small' | 'big', origin: string, bound: number, inclusive: boolean): string {
  const op = side === 'small' ? (inclusive ? '>=' : '>') : inclusive ? '<=' : '<'
  if (origin === 'string') {
    if (side === 'small' && bound === 1) return 'must not be empty'
    return `must be ${side === 'small' ? 'at least' : 'at most'} ${bound} characters long`
  }
  if (origin === 'array' || origin === 'set') {
    if (side === 'small' && bound === 1) return 'must list at least one entry'
    return `must list ${side === 'small' ? 'at least' : 'at most'} ${bound} entries`
  }
  return `must be ${op} ${bound}`
}

/** Minimal view of zod 4's schema definitions, enough to walk wrappers down to an object's keys. */
interface SchemaDef {
  readonly type: string
  readonly shape?: Record<string, z.ZodType>
  readonly innerType?: z.ZodType
  readonly element?: z.ZodType
  readonly in?: z.ZodType
  readonly valueType?: z.ZodType
}

function defOf(schema: z.ZodType): SchemaDef {
  return (schema as unknown as { _zod: { def: SchemaDef } })._zod.def
}

/** Keys of the object schema found at `path` (through defaults, optionals, arrays, pipes); [] when unknown. */
export function objectKeysAt(schema: z.ZodType, path: KeyPath): string[] {
  let current: z.ZodType | undefined = unwrap(schema)
  for (const key of path) {
    if (current === undefined) return []
    const def = defOf(current)
    if (def.type === 'object' && typeof key === 'string') current = def.shape?.[key]
    else if (def.type === 'array' && typeof key === 'number') current = def.element
    else if (def.type === 'record') current = def.valueType
    else return []
    current = current === undefined ? undefined : unwrap(current)
  }
  if (current === undefined) return []
  const def = defOf(current)
  return def.type === 'object' && def.shape !== undefined ? Object.keys(def.shape) : []
}

function unwrap(schema: z.ZodType): z.ZodType {
  let current = schema
  for (let depth = 0; depth < 16; depth++) {
    const def = defOf(current)
    const inner = def.innerType ?? (def.type === 'pipe' ? def.in : undefined)
    if (inner === undefined) return current
    current = inner
  }
  return current
}
