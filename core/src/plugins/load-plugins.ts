import { pathToFileURL } from 'node:url'
import type { LoomPlugin, Logger, PluginContext, ServerFacts } from '../contracts/index.ts'
import { LoomError } from '../errors/index.ts'
import { describeFirstIssue } from '../config/describe-issue.ts'
import { displayPath } from '../config/load-config.ts'
import { serverFacts } from '../config/server-facts.ts'
import type { ValidConfig } from '../config/valid-config.ts'
import { checkPluginModule } from './check-plugin.ts'
import { checkConflicts, checkOwnProvisions, checkRuntimePresent } from './check-provisions.ts'
import { hideOptionSecrets } from './hide-option-secrets.ts'
import { contractOfToken } from './contract-tokens.ts'
import type { CloseHook, LoadedPlugin, PluginSet, Provision } from './plugin-set.ts'
import { releasePlugins } from './release-plugins.ts'
import { resolvePlugin } from './resolve-plugin.ts'

export interface LoadPluginsOptions {
  /** Fail with `contract_missing` when no plugin provides a Backend or StepRunner (default true). */
  readonly requireRuntime?: boolean
  /** Directory file names in messages are shown relative to; defaults to `process.cwd()`. */
  readonly cwd?: string
}

/**
 * Load `config.plugins` in order: resolve `use`, import, check the metadata, validate `options`
 * with the plugin's schema, `register`, then check what it provided against what it declared and
 * against earlier plugins. The first failure releases everything registered so far (close hooks,
 * source clients) and throws a `LoomError` naming the file, the key and the plugin.
 */
export async function loadPlugins(
  config: ValidConfig,
  logger: Logger,
  options: LoadPluginsOptions = {},
): Promise<PluginSet> {
  const file = displayPath(config.file, options.cwd ?? process.cwd())
  const facts = serverFacts(config)
  const plugins: LoadedPlugin[] = []
  const provisions: Provision[] = []
  const closeHooks: CloseHook[] = []
  try {
    for (const [index, entry] of config.plugins.entries()) {
      const { plugin, loaded } = await importPlugin(entry.use, index, config.dir, file)
      const pluginOptions = parseOptions(plugin, loaded, entry.options, file, config.fromEnv)
      const hide = (text: string) => hideOptionSecrets(text, entry.options, `plugins[${index}].options`, config.fromEnv)
      const own = await registerPlugin(plugin, loaded, pluginOptions, facts, logger, closeHooks, provisions, hide)
      plugins.push(loaded)
      checkOwnProvisions(loaded, own)
      checkConflicts(provisions.slice(0, provisions.length - own.length), own)
      logger.debug({ plugin: loaded.name, provides: loaded.provides }, 'plugin registered')
    }
    if (options.requireRuntime ?? true) checkRuntimePresent(provisions)
  } catch (err) {
    await releasePlugins({ plugins, provisions, closeHooks }, logger)
    throw err
  }
  return Object.freeze({ plugins, provisions, closeHooks })
}

async function importPlugin(
  use: string,
  index: number,
  configDir: string,
  file: string,
): Promise<{ plugin: LoomPlugin; loaded: LoadedPlugin }> {
  const path = `plugins[${index}].use`
  const location = resolvePlugin(use, configDir)
  if (!location.ok) throw new LoomError('plugin_not_found', { file, path, use, detail: location.reason })
  let module: Record<string, unknown>
  try {
    module = (await import(pathToFileURL(location.file).href)) as Record<string, unknown>
  } catch (err) {
    const reason = err instanceof Error ? (err.message.split('\n')[0] ?? err.message) : String(err)
    throw new LoomError(
      'plugin_invalid',
      { file, path, use, detail: `importing ${location.file} failed: ${reason}` },
      { cause: err },
    )
  }
  const checked = checkPluginModule(module)
  if ('problem' in checked) throw new LoomError('plugin_invalid', { file, path, use, detail: checked.problem })
  const loaded: LoadedPlugin = Object.freeze({
    index,
    use,
    file: location.file,
    name: checked.name,
    label: `${checked.name} (plugins[${index}])`,
    provides: Object.freeze([...checked.provides]),
  })
  return { plugin: checked, loaded }
}

function parseOptions(
  plugin: LoomPlugin,
  loaded: LoadedPlugin,
  raw: unknown,
  file: string,
  substituted: ReadonlyMap<string, readonly string[]>,
): unknown {
  let parsed = plugin.options.safeParse(raw)
  if (parsed.success) return parsed.data
  // No `options:` at all means "the defaults" (`- use: '@loom/backend-cuda-native'`), as the
  // plugin READMEs show: read it as `{}`, so a missing required key is named rather than
  // `options` itself.
  if (raw === undefined || raw === null) {
    const empty = plugin.options.safeParse({})
    if (empty.success) return empty.data
    parsed = empty
    raw = {}
  }
  // Paths are relative to `options`, so an empty issue path names `plugins[i].options` itself.
  const prefix = `plugins[${loaded.index}].options`
  const issue = describeFirstIssue(parsed.error, { input: raw, schema: plugin.options, prefix, substituted })
  throw new LoomError('plugin_options_invalid', { file, plugin: loaded.name, ...issue }, { param: issue.path })
}

/**
 * Run `register` with a context that records what the plugin provides. Provisions and hooks are
 * appended to the shared lists as they happen, so a plugin that fails half-way is still released.
 * Returns this plugin's provisions. `hideSecrets` cleans the plugin's own error message, which
 * may quote its options.
 */
async function registerPlugin(
  plugin: LoomPlugin,
  loaded: LoadedPlugin,
  options: unknown,
  facts: ServerFacts,
  logger: Logger,
  closeHooks: CloseHook[],
  provisions: Provision[],
  hideSecrets: (text: string) => string,
): Promise<Provision[]> {
  const own: Provision[] = []
  const unknownTokens: string[] = []
  let registering = true
  const ctx: PluginContext = {
    server: facts,
    logger: logger.child({ plugin: loaded.name }),
    provide(token, implementation) {
      if (!registering) {
        throw new LoomError('plugin_contract_mismatch', {
          plugin: loaded.label,
          detail: 'called provide() after register() finished',
        })
      }
      const contract = contractOfToken(token)
      if (contract === null) {
        unknownTokens.push(String(token))
        return
      }
      const provision: Provision = Object.freeze({ plugin: loaded, contract, token, implementation })
      own.push(provision)
      provisions.push(provision)
    },
    onClose(fn) {
      closeHooks.push({ plugin: loaded, fn })
    },
  }
  try {
    await plugin.register(ctx, options)
  } catch (err) {
    const detail = hideSecrets(err instanceof Error ? err.message : String(err))
    throw new LoomError('plugin_register_failed', { plugin: loaded.label, detail }, { cause: err })
  } finally {
    registering = false
  }
  if (unknownTokens.length > 0) {
    throw new LoomError('plugin_contract_mismatch', {
      plugin: loaded.label,
      detail: `provided ${unknownTokens.join(', ')}, which is not a contract token exported by @loom/core`,
    })
  }
  return own
}
