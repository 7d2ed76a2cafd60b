import { existsSync, readFileSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

/** Directory of `@loom/core`: packages installed for the core (workspace plugins) resolve from here. */
const CORE_DIR = fileURLToPath(new URL('../..', import.meta.url))

/** Where a `use:` entry points, or why it points nowhere. */
export type PluginLocation =
  { readonly ok: true; readonly file: string } | { readonly ok: false; readonly reason: string }

/**
 * Resolve a `use:` value to the module file to import.
 *
 * - Starts with `.` or `/`: a path relative to the configuration file's directory. A file is used
 *   as is; a directory is a package folder: its `package.json` `exports` (`.`, `import`/`default`)
 *   or `main`, else `src/index.ts`, else `index.ts` / `index.js`.
 * - Anything else is a package name (or `package/subpath`), resolved from the configuration
 *   directory first and then from `@loom/core` (which sees the workspace `@loom/*` packages).
 */
export function resolvePlugin(use: string, configDir: string): PluginLocation {
  if (use.startsWith('.') || use.startsWith('/')) return resolvePath(path.resolve(configDir, use))
  for (const base of [configDir, CORE_DIR]) {
    const found = resolvePackage(use, base)
    if (found !== null) return found
  }
  return {
    ok: false,
    reason:
      'no installed package has that name (install it, or write a path starting with `./` relative to the configuration file)',
  }
}

function resolvePath(target: string): PluginLocation {
  let stats
  try {
    stats = statSync(target)
  } catch {
    return { ok: false, reason: `nothing exists at ${target}` }
  }
  if (stats.isFile()) return { ok: true, file: target }
  if (!stats.isDirectory()) return { ok: false, reason: `${target} is neither a file nor a directory` }
  const entry = packageEntry(target)
  if (entry === null) {
    return {
      ok: false,
      reason: `${target} has no package.json \`exports\` or \`main\`, and no src/index.ts, index.ts or index.js`,
    }
  }
  if (!existsSync(entry)) return { ok: false, reason: `its entry point ${entry} does not exist` }
  return { ok: true, file: entry }
}

/** A package name through Node's resolver, falling back to reading `node_modules/<name>` ourselves
 * (Node's `require` resolver refuses packages whose `exports` only offer `import`). */
function resolvePackage(use: string, base: string): PluginLocation | null {
  const require = createRequire(path.join(base, 'noop.js'))
  try {
    return { ok: true, file: require.resolve(use) }
  } catch {
    // fall through to the manual lookup
  }
  for (let dir = base; ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'node_modules', use)
    if (existsSync(candidate)) return resolvePath(candidate)
    if (path.dirname(dir) === dir) return null
  }
}

/** The ESM entry of a package folder, as an absolute path, or null when it declares none. */
function packageEntry(dir: string): string | null {
  const manifestFile = path.join(dir, 'package.json')
  if (existsSync(manifestFile)) {
    let manifest: { exports?: unknown; main?: unknown }
    try {
      manifest = JSON.parse(readFileSync(manifestFile, 'utf8')) as typeof manifest
    } catch {
      manifest = {}
    }
    const fromExports = exportsEntry(manifest.exports)
    if (fromExports !== null) return path.resolve(dir, fromExports)
    if (typeof manifest.main === 'string') return path.resolve(dir, manifest.main)
  }
  for (const name of ['src/index.ts', 'index.ts', 'index.js']) {
    const candidate = path.join(dir, name)
    if (existsSync(candidate)) return candidate
  }
  return null
}

function exportsEntry(exports: unknown): string | null {
  if (typeof exports === 'string') return exports
  if (exports === null || typeof exports !== 'object') return null
  const map = exports as Record<string, unknown>
  if ('.' in map) return exportsEntry(map['.'])
  for (const condition of ['import', 'default', 'node']) {
    const found = exportsEntry(map[condition])
    if (found !== null) return found
  }
  return null
}
