import { AdapterSource, AuthChecker, definePlugin, z } from '@loom/core'
import { HostedAuthChecker } from './hosted-auth-checker.ts'
import { HostedClient } from './hosted-client.ts'
import { HostedAdapterSource } from './hosted-source.ts'

/** Predibase's gateway, LoRAX's default for `pbase`. */
export const DEFAULT_ENDPOINT = 'https://api.app.predibase.com'

/** The `options:` block of this plugin. Documented in README.md. */
export const HostedSourceOptions = z
  .strictObject({
    /** The `adapter_source` code requests use. */
    name: z.string().min(1).default('pbase'),
    /** Repository base URL; default: env `PREDIBASE_GATEWAY_ENDPOINT`, else Predibase's gateway. */
    endpoint: z.url({ protocol: /^https?$/ }).optional(),
    /** Token used when a request sends none; default: env `PREDIBASE_API_TOKEN`. */
    token: z.string().min(1).optional(),
    /** Limit per metadata / authorization request, in milliseconds. */
    timeout_ms: z.number().int().positive().default(10_000),
    /** Tries per request (metadata, each file), with exponential backoff. */
    max_attempts: z.number().int().min(1).max(20).default(3),
    /** First backoff wait in milliseconds, doubled per try. */
    retry_base_ms: z.number().int().min(0).default(250),
  })
  .prefault({})

/** The hosted adapter repository (`adapter_source: pbase`): an AdapterSource and its AuthChecker. */
export default definePlugin({
  name: '@loom/source-hosted',
  provides: ['AdapterSource', 'AuthChecker'],
  options: HostedSourceOptions,
  register(ctx, options) {
    const endpointText = options.endpoint ?? (process.env.PREDIBASE_GATEWAY_ENDPOINT || DEFAULT_ENDPOINT)
    let endpoint: URL
    try {
      endpoint = new URL(endpointText.endsWith('/') ? endpointText : `${endpointText}/`)
    } catch {
      throw new Error('PREDIBASE_GATEWAY_ENDPOINT is not a valid URL')
    }
    const fallbackToken = options.token ?? (process.env.PREDIBASE_API_TOKEN || undefined)
    const retry = { attempts: options.max_attempts, baseMs: options.retry_base_ms }
    const client = new HostedClient({ endpoint, timeoutMs: options.timeout_ms, retry })
    ctx.provide(
      AdapterSource,
      new HostedAdapterSource({
        name: options.name,
        client,
        retry,
        ...(fallbackToken === undefined ? {} : { fallbackToken }),
      }),
    )
    ctx.provide(AuthChecker, new HostedAuthChecker(options.name, client, fallbackToken))
    ctx.logger.info(
      { source: options.name, endpoint: endpoint.host, fallbackToken: fallbackToken !== undefined },
      'hosted adapter source ready',
    )
  },
})
