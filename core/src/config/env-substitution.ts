import { isMap, isPair, isScalar, isSeq, parse as parseYaml, type Document, type Node } from 'yaml'
import { LoomError } from '../errors/index.ts'
import { formatKeyPath } from './issue-path.ts'
import { showConfigValue } from './shown-value.ts'

/**
 * `${VAR}` and `${VAR:-default}` in string values of the configuration.
 *
 * - Only values are substituted, never keys, so the file's shape cannot depend on the environment.
 * - `${VAR:-default}` uses `default` when VAR is unset or empty (shell semantics); `${VAR}` with
 *   VAR unset is `config_env_missing`. `$${VAR}` is a literal `${VAR}`.
 * - An unquoted value that is exactly one reference (`port: ${PORT:-3000}`) is re-read as a YAML
 *   scalar, so numbers and booleans keep their type; quoted values (`"${PORT}"`) stay strings.
 */

const REFERENCE = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g
const WHOLE_REFERENCE = /^\$\{[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\}$/

export type Env = Readonly<Record<string, string | undefined>>

/**
 * Substitute in place on the parsed document. Returns the rendered key paths that received a
 * value from the environment, with the variables used, so errors never echo those values.
 */
export function substituteEnv(doc: Document, env: Env, file: string): Map<string, string[]> {
  const substituted = new Map<string, string[]>()
  walk(doc.contents, [], (node, path) => {
    if (typeof node.value !== 'string' || !node.value.includes('$')) return
    const source = node.value
    const names: string[] = []
    const rendered = formatKeyPath(path)
    const replaced = source.replace(REFERENCE, (whole, name: string | undefined, fallback: string | undefined) => {
      if (name === undefined) return '$' // `$$` escape
      const value = env[name]
      if (value !== undefined && value !== '') {
        names.push(name)
        return value
      }
      if (fallback !== undefined) return fallback
      if (value === '') return ''
      throw new LoomError('config_env_missing', { file, path: rendered, name })
    })
    // A `${` that the pattern did not consume is a typo (`${1X}`, a missing `}`); say so now.
    const leftover = source.replace(REFERENCE, '')
    if (leftover.includes('${')) {
      throw new LoomError('config_invalid', {
        file,
        path: rendered,
        expected: 'has a malformed `${...}` reference (write ${NAME} or ${NAME:-default})',
        received: showConfigValue(source, path),
      })
    }
    if (names.length > 0) substituted.set(rendered, names)
    node.value = node.type === 'PLAIN' && WHOLE_REFERENCE.test(source) ? retype(replaced) : replaced
  })
  return substituted
}

/** Read a substituted plain value as YAML would have: `3000` → 3000, `true` → true; anything else stays text. */
function retype(text: string): unknown {
  try {
    const value: unknown = parseYaml(text)
    return typeof value === 'number' || typeof value === 'boolean' ? value : text
  } catch {
    return text
  }
}

type ScalarNode = { value: unknown; type?: string | undefined }

function walk(node: unknown, path: PropertyKey[], visit: (node: ScalarNode, path: PropertyKey[]) => void): void {
  if (isScalar(node)) {
    visit(node, path)
  } else if (isMap(node)) {
    for (const pair of node.items) {
      if (!isPair(pair)) continue
      const key = isScalar(pair.key) ? pair.key.value : pair.key
      walk(pair.value, [...path, String(key)], visit)
    }
  } else if (isSeq(node)) {
    node.items.forEach((item, index) => walk(item as Node, [...path, index], visit))
  }
  // Aliases are skipped: the anchored node they point to is substituted where it is defined.
}
