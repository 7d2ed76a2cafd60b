import { existsSync } from 'node:fs'
import type { DestinationStream } from 'pino'
import type { DownloadStatus } from '../adapters/download-progress.ts'
import { AdapterCache } from '../adapters/adapter-cache.ts'
import { AdapterManager, type KnownAdapter } from '../adapters/adapter-manager.ts'
import { AuthGate } from '../adapters/auth-gate.ts'
import { readLoraAdapter } from '../adapters/read-lora.ts'
import { readMedusaAdapter } from '../adapters/read-medusa.ts'
import { warnOnOtherBaseModel } from '../adapters/check-base-model.ts'
import type { ValidConfig } from '../config/index.ts'
import { createServerContainer, type ServerContainer } from '../container/index.ts'
import type { Backend } from '../contracts/backend.ts'
import type { AdapterHandle, AdapterKind, LocalAdapter } from '../contracts/adapter.ts'
import type { AdapterSource } from '../contracts/adapter-source.ts'
import type { TokenConstraintFactory } from '../contracts/grammar.ts'
import type { ModelSpec } from '../contracts/step-runner.ts'
import { TokenizerLoader, type Tokenizer } from '../contracts/tokenizer.ts'
import { TemplateEngine } from '../contracts/template-engine.ts'
import { ChatTemplates } from '../templates/chat-templates.ts'
import { BatchingEngine } from '../engine/index.ts'
import { LoomError } from '../errors/index.ts'
import { GenerationService } from '../generation/generation-service.ts'
import type { RequestLimits } from '../generation/generation-request.ts'
import { createHttpApp, type HttpApp, type InfoResponse, type InfoSpeculator } from '../http/index.ts'
import { createLogger, type LoomLogger } from '../logging/index.ts'
import { createMetrics } from '../metrics/index.ts'
import { nativeRoutes } from '../routes/native/native-routes.ts'
import { chatRoute } from '../routes/openai/chat-route.ts'
import { completionsRoute } from '../routes/openai/completions-route.ts'
import { modelsRoute } from '../routes/openai/models-route.ts'
import { JinjaTemplateEngine } from '../templates/jinja-template-engine.ts'
import { HfTokenizerLoader } from '../tokenizer/index.ts'
import { XGrammarConstraintFactory } from '../structured/index.ts'
import { LOOM_VERSION } from '../version.ts'
import { readEosTokenIds } from './model-generation-config.ts'
import { resolveLimits } from './resolve-limits.ts'
import { StartupPhases } from './startup-phases.ts'
import { LORA_CONFIG_FILE } from '../sources/adapter-files.ts'

export interface LoomServerOptions {
  /** Where log lines go (stdout when absent); tests capture them. */
  readonly logDestination?: DestinationStream
}

/** What the routes need once the backend is up. */
export interface ServingState {
  readonly generation: GenerationService
  readonly limits: RequestLimits
  readonly knownAdapters: () => Promise<readonly KnownAdapter[]>
  /** Adapter downloads in flight, with their progress. */
  readonly downloads: () => readonly DownloadStatus[]
}

/** Parses adapter files into weights for the engine (after shape validation against the model). */
function adapterReader(config: ValidConfig, logger: LoomLogger) {
  return async (adapter: LocalAdapter, spec: ModelSpec) => {
    if (adapter.kind === 'lora') {
      const weights = await readLoraAdapter(adapter.dir, adapter.resolved.id, spec)
      await warnOnOtherBaseModel(adapter.dir, adapter.resolved.id, config.model, logger)
      return weights
    }
    return readMedusaAdapter(adapter.dir, adapter.resolved.id, spec)
  }
}

/** How long `/v1/models` waits on a source to tell whether a listed adapter is a LoRA. */
const LISTING_RESOLVE_MS = 5000

/**
 * `/v1/models` lists the base model and LoRA adapters only (vLLM's semantics): a Medusa head a
 * source lists (a local root that holds one) changes no output, and a client or gateway choosing a
 * model from the list would take it for an adapter that does. `loaded` gives the kinds of what the
 * server loaded at start (default heads, preloads) by handle key; any other entry is resolved on
 * its source (a few stat calls for a local directory) and kept when its files hold
 * `adapter_config.json`. An entry that does not resolve stays listed, as its source offers it.
 */
async function loraAdapters(
  known: readonly KnownAdapter[],
  sources: ReadonlyMap<string, AdapterSource>,
  loaded: ReadonlyMap<string, AdapterKind>,
  logger: LoomLogger,
): Promise<KnownAdapter[]> {
  const isLora = await Promise.all(
    known.map(async (adapter) => {
      const kind = loaded.get(`${adapter.source}:${adapter.id}@${adapter.revision}`)
      if (kind !== undefined) return kind === 'lora'
      const ctx = { signal: AbortSignal.timeout(LISTING_RESOLVE_MS), logger }
      const resolved = await sources
        .get(adapter.source)
        ?.resolve(adapter, ctx)
        .catch(() => undefined)
      return resolved?.files.some((file) => file.path === LORA_CONFIG_FILE) ?? true
    }),
  )
  return known.filter((_, i) => isLora[i])
}

/** A plugin's package name without scope and `backend-` prefix: `@loom/backend-cuda-native` → `cuda-native`. */
function shortName(plugin: string): string {
  return plugin.replace(/^@[^/]+\//, '').replace(/^backend-/, '')
}

/**
 * One Loom server: its container and plugins, the backend, and the HTTP app. `create` builds
 * everything that cannot fail late (config, plugins, tokenizer); `start` loads the model and opens
 * the generation routes, while `/health` answers 503 until it is done.
 */
export class LoomServer {
  readonly app: HttpApp
  readonly backend: Backend
  readonly logger: LoomLogger
  readonly #container: ServerContainer
  readonly #tokenizer: Tokenizer
  readonly #config: ValidConfig
  #state: ServingState | null = null
  /** The default Medusa heads, for `/info`; null without speculation. */
  #speculator: InfoSpeculator | null = null
  /** The structured-output engine, created in `start` (it needs the model's vocabulary). */
  #constraints: TokenConstraintFactory | null = null
  #starting: Promise<void> | null = null
  #closing: Promise<void> | null = null
  readonly #closeHooks: (() => void)[] = []
  /** Aborts adapter downloads first on close, so a request stuck downloading cannot hold up the drain. */
  #stopDownloads: () => void = () => undefined

  private constructor(parts: {
    app: HttpApp
    backend: Backend
    logger: LoomLogger
    container: ServerContainer
    tokenizer: Tokenizer
    config: ValidConfig
  }) {
    this.app = parts.app
    this.backend = parts.backend
    this.logger = parts.logger
    this.#container = parts.container
    this.#tokenizer = parts.tokenizer
    this.#config = parts.config
  }

  static async create(config: ValidConfig, options: LoomServerOptions = {}): Promise<LoomServer> {
    const logger = createLogger({ level: config.server.log_level, destination: options.logDestination })
    const container = await createServerContainer(config, logger, {
      defaults: { TemplateEngine: () => new JinjaTemplateEngine(), TokenizerLoader: () => new HfTokenizerLoader() },
    })
    try {
      const tokenizer = await container.container.resolve<TokenizerLoader>(TokenizerLoader).load(config.model.path)
      if (!tokenizer) {
        const missing = !existsSync(config.model.path)
        throw new LoomError('model_invalid', {
          path: config.model.path,
          detail: missing
            ? `the directory does not exist (check \`model.path\` in ${config.file})`
            : 'it has no tokenizer.json',
        })
      }
      const runtime = container.backendOrRunner()
      const runnerPlugin = container.plugins.provisions.find((p) => p.contract === 'StepRunner')?.plugin.name
      const backend =
        runtime.kind === 'backend'
          ? runtime.backend
          : new BatchingEngine({
              runner: runtime.runner,
              limits: {
                maxBatchSize: config.limits.max_batch_size,
                maxBatchPrefillTokens: config.limits.max_batch_prefill_tokens,
                maxConcurrentRequests: config.limits.max_concurrent_requests,
                maxTotalTokens: config.limits.max_total_tokens,
              },
              readAdapter: adapterReader(config, logger.child({ component: 'adapters' })),
              hostCacheBytes: config.adapters.host_cache_mb * 1024 * 1024,
              adapterLoadTimeoutMs: config.adapters.slot_wait_s * 1000,
              speculation: {
                ...(config.speculation.medusa_choices ? { choices: config.speculation.medusa_choices } : {}),
                maxBatchSize: config.speculation.max_batch_size,
                maxTokens: config.speculation.max_tokens,
                promptLookup: {
                  ngramSize: config.speculation.prompt_lookup.ngram_size,
                  draftTokens: config.speculation.prompt_lookup.draft_tokens,
                },
                drafterChoice: config.speculation.drafter_choice,
              },
              logger: logger.child({ component: 'engine' }),
              name: shortName(runnerPlugin ?? 'step-runner'),
              // Read at each request with a grammar: the structured-output engine exists from `start`.
              constraints: () => (server === null ? null : server.#constraints),
              // Steps start only once requests arrive, after `metrics` below exists.
              onStep: (step) => metrics.batchStep(step.method, step.size, step.durationS, step.ok),
            })
      let server: LoomServer | null = null
      const metrics = createMetrics({
        sample: () => (server?.serving ? backend.stats() : undefined),
        speculation: backend instanceof BatchingEngine ? () => backend.speculationStats() : undefined,
        gateway: config.metrics.inference_gateway
          ? () =>
              server?.serving ? { ...backend.stats(), adapterSlots: backend.capabilities().adapterSlots } : undefined
          : undefined,
      })
      const app = await createHttpApp({
        config: {
          bodyLimit: config.server.body_limit,
          timeouts: {
            headersMs: config.server.headers_timeout_s * 1000,
            requestMs: config.server.request_timeout_s * 1000,
            keepAliveMs: config.server.keep_alive_timeout_s * 1000,
          },
        },
        isReady: () => (server?.serving ?? null) !== null,
        info: () => server!.#info(),
        metrics,
        logger,
      })
      server = new LoomServer({ app, backend, logger, container, tokenizer, config })
      const routeDeps = {
        state: () => server?.serving ?? null,
        defaultSource: config.adapters.default_source,
        modelId: config.model.id,
        createdAt: Math.floor(Date.now() / 1000),
      }
      await app.register(nativeRoutes(routeDeps))
      await app.register(chatRoute(routeDeps))
      await app.register(completionsRoute(routeDeps))
      await app.register(modelsRoute(routeDeps))
      return server
    } catch (err) {
      await container.dispose()
      throw err
    }
  }

  /** The generation service and limits once the model is loaded; null before. */
  get serving(): ServingState | null {
    return this.#state
  }

  /** Load the model; resolves when generation routes accept requests. Idempotent. */
  start(): Promise<void> {
    this.#starting ??= this.#start()
    return this.#starting
  }

  async #start(): Promise<void> {
    const config = this.#config
    const phases = new StartupPhases(this.logger)
    await phases.run('weights', 'loading the model weights', () => this.backend.start())
    const limits = resolveLimits(config, this.backend.capabilities())
    const logger = this.logger.child({ component: 'adapters' })
    const cache = new AdapterCache({
      root: config.adapters.cache_dir,
      attempts: config.adapters.download_attempts,
      logger,
      metrics: this.app.loomMetrics,
    })
    const adapters = new AdapterManager({
      sources: this.#container.adapterSources(),
      auth: new AuthGate({
        checkers: this.#container.authCheckers(),
        ttlSeconds: config.adapters.auth_ttl_s,
        metrics: this.app.loomMetrics,
      }),
      backend: this.backend,
      cache,
      logger,
      resolveTtlSeconds: config.adapters.resolve_ttl_s,
      onLoaded: (source, seconds) => this.app.loomMetrics.adapterLoaded(source, seconds),
    })
    this.#stopDownloads = () => adapters.close()
    const eosTokenIds = await readEosTokenIds(config.model.path)
    // Structured output: the grammar engine loads lazily on the first response_format request.
    const constraints = await XGrammarConstraintFactory.fromModelDir(config.model.path, {
      vocabSize: this.backend.capabilities().vocabSize,
      eosTokenIds,
      jsonWhitespace: config.structured_output.json_whitespace,
    })
    this.#closeHooks.push(() => constraints.close())
    this.#constraints = constraints
    // The default Medusa heads, loaded before the routes open (fetched with the server's own credentials).
    let defaultSpeculator: AdapterHandle | null = null
    // Kinds of what is loaded here, by handle key: `/v1/models` leaves the Medusa ones out.
    const loaded = new Map<string, AdapterKind>()
    const medusa = config.speculation.medusa_adapter
    if (medusa !== null) {
      const id = medusa.id
      if (!this.backend.capabilities().medusa) {
        throw new LoomError('adapter_invalid', { id, detail: 'this backend cannot run Medusa heads' })
      }
      const ref = { source: medusa.source ?? config.adapters.default_source, id }
      const { handle } = await phases.run('speculator', `loading the Medusa heads ${id}`, () =>
        adapters.acquire(ref, undefined, AbortSignal.timeout(30 * 60 * 1000)),
      )
      if (handle.kind !== 'medusa') {
        throw new LoomError('adapter_invalid', { id, detail: 'speculation.medusa_adapter is not a Medusa adapter' })
      }
      defaultSpeculator = handle
      loaded.set(handle.key, handle.kind)
      this.#speculator = { kind: 'medusa', adapter_id: id, adapter_source: ref.source, heads: handle.size }
      this.logger.info({ adapter: handle.key, heads: handle.size }, 'default Medusa adapter loaded')
    }
    const generation = new GenerationService({
      defaultSpeculator,
      backend: this.backend,
      tokenizer: this.#tokenizer,
      adapters,
      templates: new ChatTemplates(
        this.#container.container.resolve<TemplateEngine>(TemplateEngine),
        this.#tokenizer,
        config.model.id,
      ),
      limits,
      eosTokenIds,
      constraints,
    })
    // Preloaded adapters are fetched with the server's own credentials (sources may have a global token).
    const preloaded = config.adapters.preload.map((entry) => ({
      source: entry.source ?? config.adapters.default_source,
      id: entry.id,
    }))
    const preload = async () => {
      for (const [index, ref] of preloaded.entries()) {
        const { handle } = await adapters.acquire(ref, undefined, AbortSignal.timeout(30 * 60 * 1000)).catch((err) => {
          // Name the configuration entry: the adapter's own error reads like a request's.
          throw new LoomError(
            'config_invalid',
            {
              file: config.file,
              path: `adapters.preload[${index}]`,
              expected: `cannot be preloaded with the server's own credentials (${err instanceof Error ? err.message : String(err)})`,
              received: JSON.stringify(ref),
            },
            { cause: err },
          )
        })
        loaded.set(handle.key, handle.kind)
        logger.info({ adapter: handle.key, kind: handle.kind }, 'preloaded adapter')
      }
    }
    if (preloaded.length > 0) await phases.run('preload', `preloading ${preloaded.length} adapter(s)`, preload)
    const sources = this.#container.adapterSources()
    this.#state = {
      generation,
      limits,
      knownAdapters: async () => loraAdapters(await adapters.known(preloaded), sources, loaded, logger),
      downloads: () => adapters.downloads(),
    }
    this.logger.info(
      { model: config.model.id, backend: this.backend.capabilities().name, ...phases.summary() },
      'model ready',
    )
  }

  #info(): InfoResponse {
    const caps = this.backend.capabilities()
    const limits = this.#state!.limits
    const config = this.#config
    return {
      model_id: config.model.id,
      model_dtype: caps.dtype,
      model_device_type: caps.device,
      backend: caps.name,
      max_input_length: limits.maxInputLength,
      max_total_tokens: limits.maxTotalTokens,
      max_batch_size: config.limits.max_batch_size,
      max_concurrent_requests: config.limits.max_concurrent_requests,
      max_stop_sequences: limits.maxStopSequences,
      max_batch_prefill_tokens: config.limits.max_batch_prefill_tokens,
      version: LOOM_VERSION,
      adapter_sources: [...this.#container.adapterSources().keys()],
      default_adapter_source: config.adapters.default_source,
      speculator: this.#speculator,
    }
  }

  /** Listen on `host:port` (config values unless overridden); returns the address. */
  async listen(overrides: { host?: string; port?: number } = {}): Promise<string> {
    return this.app.listen({
      host: overrides.host ?? this.#config.server.host,
      port: overrides.port ?? this.#config.server.port,
    })
  }

  /** Stop accepting requests, drain running ones, release plugins. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#stopDownloads()
      await this.app.close()
      await this.backend.close()
      for (const hook of this.#closeHooks) hook()
      await this.#container.dispose()
    })()
    return this.#closing
  }
}
