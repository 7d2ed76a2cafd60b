import type { z } from 'zod'
import type { Logger } from './logger.ts'

/** The contracts a plugin may provide; the loader checks a plugin provides exactly what it declares. */
export type ContractName =
  'AdapterSource' | 'AuthChecker' | 'Backend' | 'StepRunner' | 'TemplateEngine' | 'TokenizerLoader'

/** Facts from the validated server configuration that plugins may read. */
export interface ServerFacts {
  /** Absolute path of the base model directory (`model.path`). */
  readonly modelPath: string
  /** The served model id (`model.id`), shown in `/info` and `/v1/models`. */
  readonly modelId: string
  /** Absolute path of the adapter cache directory. */
  readonly cacheDir: string
  /** Directory of the configuration file; relative plugin paths resolve against it. */
  readonly configDir: string
  /** Limits from `limits:` in the configuration. */
  readonly limits: Readonly<Record<string, number>>
}

/** What a plugin's `register` receives. */
export interface PluginContext {
  readonly server: ServerFacts
  /** A child logger named after the plugin. */
  readonly logger: Logger
  /**
   * Provide an implementation of a contract under its injection token (`AdapterSource`,
   * `AuthChecker`, `Backend`, `StepRunner`, `TemplateEngine`, `TokenizerLoader`).
   * Multi-provider contracts (`AdapterSource`, `AuthChecker`) may be provided more than once.
   */
  provide<T>(token: symbol, implementation: T): void
  /** Run `fn` when the server closes (in reverse registration order), after in-flight requests drained. */
  onClose(fn: () => Promise<void> | void): void
}

/**
 * A Loom plugin: the default export of a package or module named by a `use:` entry.
 * Build it with `definePlugin` so the options type flows from the schema into `register`.
 */
export interface LoomPlugin<Schema extends z.ZodType = z.ZodType> {
  /** Unique plugin name, shown in errors (`@loom/source-hub`, `acme-source-artifactory`). */
  readonly name: string
  /** Contracts this plugin provides; a required contract with no provider fails startup. */
  readonly provides: readonly ContractName[]
  /** Zod schema of the plugin's `options:` block; the loader validates before `register` runs. */
  readonly options: Schema
  /** Register implementations. May be async (open clients, read files). */
  register(ctx: PluginContext, options: z.output<Schema>): void | Promise<void>
}

/** Identity helper that types a plugin's options from its schema. */
export function definePlugin<Schema extends z.ZodType>(plugin: LoomPlugin<Schema>): LoomPlugin<Schema> {
  return plugin
}
