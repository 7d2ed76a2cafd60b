import type { ContractName } from '../contracts/index.ts'

/** One `plugins[i]` entry after loading. */
export interface LoadedPlugin {
  /** Position in `plugins:`. */
  readonly index: number
  /** The `use:` value as written. */
  readonly use: string
  /** The module file that was imported. */
  readonly file: string
  /** The plugin's own `name`. */
  readonly name: string
  /** How errors name it: `name (plugins[i])`, unambiguous when one plugin is listed twice. */
  readonly label: string
  readonly provides: readonly ContractName[]
}

/** One implementation a plugin passed to `ctx.provide`. */
export interface Provision {
  readonly plugin: LoadedPlugin
  readonly contract: ContractName
  readonly token: symbol
  readonly implementation: unknown
}

/** A hook from `ctx.onClose`, with the plugin that registered it (for logs). */
export interface CloseHook {
  readonly plugin: LoadedPlugin
  readonly fn: () => Promise<void> | void
}

/** Everything the plugins of one configuration registered, in registration order. */
export interface PluginSet {
  readonly plugins: readonly LoadedPlugin[]
  readonly provisions: readonly Provision[]
  readonly closeHooks: readonly CloseHook[]
}
