import 'reflect-metadata'
import { container as globalContainer, type DependencyContainer } from 'tsyringe'
import type {
  AdapterSource,
  AuthChecker,
  Backend,
  Logger,
  ServerFacts,
  StepRunner,
  TemplateEngine,
  TokenizerLoader,
} from '../contracts/index.ts'
import { serverFacts } from '../config/server-facts.ts'
import type { ValidConfig } from '../config/valid-config.ts'
import { CONTRACT_TOKENS } from '../plugins/contract-tokens.ts'
import { loadPlugins, type LoadPluginsOptions } from '../plugins/load-plugins.ts'
import type { PluginSet } from '../plugins/plugin-set.ts'
import { releasePlugins } from '../plugins/release-plugins.ts'
import { ServerConfig, ServerLogger } from './tokens.ts'

/**
 * Core implementations used when no plugin provides the contract. Factories, so a default that a
 * plugin overrides is never even built.
 */
export interface CoreDefaults {
  readonly TemplateEngine?: (facts: ServerFacts) => TemplateEngine
  readonly TokenizerLoader?: (facts: ServerFacts) => TokenizerLoader
}

export interface ServerContainerOptions extends LoadPluginsOptions {
  readonly defaults?: CoreDefaults
}

/** The model runtime: a request-level Backend, or a StepRunner the core wraps in its BatchingEngine. */
export type ModelRuntime =
  | { readonly kind: 'backend'; readonly backend: Backend }
  | { readonly kind: 'step-runner'; readonly runner: StepRunner }

/** One server's dependency container, built from its configuration and plugins. */
export interface ServerContainer {
  readonly config: ValidConfig
  /** A child of tsyringe's root container, private to this server. */
  readonly container: DependencyContainer
  readonly plugins: PluginSet
  /** Sources by `adapter_source` code, in plugin order. */
  adapterSources(): ReadonlyMap<string, AdapterSource>
  /** Auth checkers by the source they guard; a source absent here is allow-all. */
  authCheckers(): ReadonlyMap<string, AuthChecker>
  backendOrRunner(): ModelRuntime
  /**
   * Release everything: plugins' `onClose` hooks (reverse order), `close()` on every source, then
   * the container. Idempotent: later calls return the first call's promise. Does not drain the
   * backend; the server closes it first.
   */
  dispose(): Promise<void>
}

/**
 * Build a server's container: load the plugins named in `config`, register what they provide, and
 * fill the gaps with `options.defaults`.
 *
 * Registration scheme (tsyringe, value providers only):
 * - every provision is registered with `{ useValue }` under its contract token, in plugin order;
 * - multi-provider contracts (`AdapterSource`, `AuthChecker`) have one registration per
 *   implementation: read them with `container.resolveAll(token)` (or the keyed accessors here);
 * - single contracts (`Backend` or `StepRunner`, `TemplateEngine`, `TokenizerLoader`) have at most
 *   one registration, guaranteed by the loader's conflict checks: read them with `resolve(token)`;
 * - a core default is registered only when no plugin provided the contract, so a plugin wins;
 * - `ServerConfig` and `ServerLogger` carry the config and logger for core services.
 * Nothing is ever registered in tsyringe's global container.
 */
export async function createServerContainer(
  config: ValidConfig,
  logger: Logger,
  options: ServerContainerOptions = {},
): Promise<ServerContainer> {
  const plugins = await loadPlugins(config, logger, options)
  const child = globalContainer.createChildContainer()
  const sources = new Map<string, AdapterSource>()
  const checkers = new Map<string, AuthChecker>()
  try {
    child.register(ServerConfig, { useValue: config })
    child.register(ServerLogger, { useValue: logger })
    for (const provision of plugins.provisions) child.register(provision.token, { useValue: provision.implementation })

    const facts = serverFacts(config)
    const provided = new Set(plugins.provisions.map((p) => p.contract))
    for (const contract of ['TemplateEngine', 'TokenizerLoader'] as const) {
      const factory = options.defaults?.[contract]
      if (factory !== undefined && !provided.has(contract)) {
        child.register(CONTRACT_TOKENS[contract], { useValue: factory(facts) })
      }
    }

    for (const provision of plugins.provisions) {
      if (provision.contract === 'AdapterSource') {
        const source = provision.implementation as AdapterSource
        sources.set(source.name, source)
      } else if (provision.contract === 'AuthChecker') {
        const checker = provision.implementation as AuthChecker
        checkers.set(checker.source, checker)
      }
    }
    for (const source of checkers.keys()) {
      if (!sources.has(source)) logger.warn({ source }, 'an AuthChecker guards an adapter_source no plugin provides')
    }
  } catch (err) {
    // A default that fails to build must not leak what the plugins already opened.
    await releasePlugins(plugins, logger)
    await child.dispose()
    throw err
  }

  const runtime = plugins.provisions.find((p) => p.contract === 'Backend' || p.contract === 'StepRunner')
  let disposing: Promise<void> | undefined

  return Object.freeze({
    config,
    container: child,
    plugins,
    adapterSources: () => sources,
    authCheckers: () => checkers,
    backendOrRunner(): ModelRuntime {
      if (runtime === undefined)
        throw new Error('no Backend or StepRunner was provided (loaded with requireRuntime: false)')
      return runtime.contract === 'Backend'
        ? { kind: 'backend', backend: runtime.implementation as Backend }
        : { kind: 'step-runner', runner: runtime.implementation as StepRunner }
    },
    dispose(): Promise<void> {
      disposing ??= (async () => {
        await releasePlugins(plugins, logger)
        await child.dispose()
      })()
      return disposing
    },
  })
}
