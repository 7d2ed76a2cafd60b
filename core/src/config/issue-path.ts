/** Key paths as users read them in error messages: `limits.max_batch_size`, `plugins[1].use`. */

export type KeyPath = readonly PropertyKey[]

/** Render a key path; `prefix` is prepended (`plugins[1].options`). The empty path reads `(top level)`. */
export function formatKeyPath(path: KeyPath, prefix = ''): string {
  let out = prefix
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`
    else out += out === '' ? String(key) : `.${String(key)}`
  }
  return out === '' ? '(top level)' : out
}

/** The value found at `path` inside `root`, or undefined when any step is missing. */
export function valueAt(root: unknown, path: KeyPath): unknown {
  let current: unknown = root
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined
    current = (current as Record<PropertyKey, unknown>)[key]
  }
  return current
}
