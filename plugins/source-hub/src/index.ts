import { AdapterSource, AuthChecker, definePlugin, z } from '@loom/core'
import { GLOBAL_TOKEN_VARIABLES, globalTokenEnabled, readGlobalToken } from './global-token.ts'
import { HubAuthChecker } from './hub-auth-checker.ts'
import { HubClient } from './hub-client.ts'
import { HubAdapterSource } from './hub-source.ts'

/** The `options:` block of this plugin. Documented in README.md. */
export const HubSourceOptions = z
  .strictObject({
    /** The hub's base URL (a mirror or a hub-compatible server works too). */
    hub_url: z.url({ protocol: /^https?$/ }).default('https://huggingface.co'),
    /** The `adapter_source` code requests use. */
    name: z.string().min(1).default('hub'),
    /** Requests without a token use the server's HF_TOKEN / HUGGING_FACE_HUB_TOKEN (also on with LORAX_USE_GLOBAL_HF_TOKEN=1 or LOOM_USE_GLOBAL_HF_TOKEN=1). */
    use_global_token: z.boolean().default(false),
    /** Limit for each metadata request, and for each wait on the next chunk of a download, in ms. */
    timeout_ms: z.number().int().positive().default(30_000),
    /** Retries of a transient failure (no answer, 5xx, 429, a cut or damaged download). */
    retries: z.number().int().min(0).max(10).default(3),
  })
  .prefault({})

/** Adapters from the Hugging Face hub (`adapter_source: hub`), with a per-request access check. */
export default definePlugin({
  name: '@loom/source-hub',
  provides: ['AdapterSource', 'AuthChecker'],
  options: HubSourceOptions,
  register(ctx, options) {
    const client = new HubClient(options.hub_url, options.timeout_ms)
    const fallback = globalTokenEnabled(options.use_global_token, process.env)
    const globalToken = fallback ? readGlobalToken(process.env) : undefined
    const tokenFor = (token: string | undefined) => token ?? globalToken
    // `retries` counts the tries after the first; waits from 250 ms, ±20%, at most 5 s.
    const retry = { attempts: options.retries + 1, baseMs: 250, maxMs: 5_000, jitter: 0.2 }
    const host = new URL(client.hubUrl).host
    if (fallback && globalToken === undefined) {
      ctx.logger.warn(
        { source: options.name, variables: GLOBAL_TOKEN_VARIABLES.join(', ') },
        'global hub token fallback is on, but no server token is set; requests without a token stay anonymous',
      )
    } else if (fallback) {
      ctx.logger.warn(
        { source: options.name },
        'global hub token fallback is on: callers without a token can use every adapter the server token can read',
      )
    }
    ctx.provide(
      AdapterSource,
      new HubAdapterSource({
        name: options.name,
        client,
        retry,
        timeoutMs: options.timeout_ms,
        tokenFor,
        logger: ctx.logger,
      }),
    )
    ctx.provide(
      AuthChecker,
      new HubAuthChecker({
        source: options.name,
        client,
        retry,
        tokenFor,
        globalFallback: fallback,
        logger: ctx.logger,
      }),
    )
    ctx.logger.info({ source: options.name, host, global_token: fallback }, 'hub adapter source ready')
  },
})
