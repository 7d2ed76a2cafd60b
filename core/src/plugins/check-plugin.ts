import { describeValue } from '../errors/index.ts'
import type { LoomPlugin } from '../contracts/index.ts'
import { CONTRACT_NAMES, isContractName } from './contract-tokens.ts'

/**
 * Check a module's default export against the `LoomPlugin` shape. Returns the plugin, or the
 * reason it is not one (the loader wraps it in `plugin_invalid`).
 */
export function checkPluginModule(module: Record<string, unknown>): LoomPlugin | { readonly problem: string } {
  if (!('default' in module) || module.default === undefined) {
    return { problem: 'it has no default export (write `export default definePlugin({ ... })`)' }
  }
  const plugin = module.default as Record<string, unknown> | null
  if (plugin === null || typeof plugin !== 'object') {
    return { problem: `its default export must be an object built with definePlugin; found ${kindOf(plugin)}` }
  }
  if (typeof plugin.name !== 'string' || plugin.name.trim() === '') {
    return { problem: `\`name\` must be a non-empty string; found ${describeValue(plugin.name)}` }
  }
  const provides = plugin.provides
  if (!Array.isArray(provides) || provides.length === 0 || !provides.every(isContractName)) {
    return {
      problem: `\`provides\` must be a non-empty list of ${CONTRACT_NAMES.join(', ')}; found ${describeValue(provides)}`,
    }
  }
  const options = plugin.options as { safeParse?: unknown } | null | undefined
  if (options === null || typeof options !== 'object' || typeof options.safeParse !== 'function') {
    return { problem: `\`options\` must be a zod schema (use \`z\` from '@loom/core'); found ${kindOf(options)}` }
  }
  if (typeof plugin.register !== 'function') {
    return { problem: `\`register\` must be a function; found ${kindOf(plugin.register)}` }
  }
  return plugin as unknown as LoomPlugin
}

function kindOf(value: unknown): string {
  if (typeof value === 'function') return 'a function'
  if (Array.isArray(value)) return 'a list'
  if (value !== null && typeof value === 'object') return 'an object'
  return describeValue(value)
}
