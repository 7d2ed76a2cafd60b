import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import sseModule, { type SSEPluginOptions } from '@fastify/sse'
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify'
import { LoomError } from '../errors/loom-error.ts'
import type { LoomLogger } from '../logging/create-logger.ts'
import { redactSecrets } from '../logging/redact-secrets.ts'
import type { Metrics } from '../metrics/create-metrics.ts'
import { clientErrorHandler } from './client-errors.ts'
import { installErrorHandlers } from './error-handlers.ts'
import type {} from './fastify-decorations.ts'
import type { InfoResponse } from './info-response.ts'
import { DEFAULT_HTTP_TIMEOUTS, serverTimeoutOptions, type HttpTimeouts } from './http-timeouts.ts'
import { installJsonBodyParser } from './json-body-parser.ts'
import { registerOpenApi } from './openapi/register-openapi.ts'
import { registerSystemRoutes } from './system-routes.ts'

// @fastify/sse is CommonJS: its `module.exports` is the plugin wrapped with fastify-plugin (so its
// onRoute hook sees routes of every context), while the typed `default`/`fastifySSE` exports are the
// unwrapped function. Import the module object and type it as the plugin.
const fastifySSE = sseModule as unknown as FastifyPluginAsync<SSEPluginOptions>

/** The HTTP facts of the validated config. */
export interface HttpConfig {
  /** Largest accepted request body in bytes (`server.body_limit`). */
  readonly bodyLimit: number
  /** Milliseconds between SSE heartbeat comments on idle streams; 0 disables. Default 15000. */
  readonly sseHeartbeatMs?: number
  /** How long a client may take to send a request (`server.*_timeout_s`); default `DEFAULT_HTTP_TIMEOUTS`. */
  readonly timeouts?: HttpTimeouts
}

/** What the HTTP layer needs from the rest of the server. */
export interface HttpAppDeps {
  readonly config: HttpConfig
  /** True once the backend has started: `/health` turns 200 and `/info` answers. */
  isReady(): boolean
  /** The `/info` body; called only when ready. */
  info(): InfoResponse
  /** The server's metrics; `/metrics` renders its registry. */
  readonly metrics: Metrics
  /** From `createLogger`: fastify logs requests through it, so they are redacted too. */
  readonly logger: LoomLogger
}

/** The fastify instance `createHttpApp` returns. */
export type HttpApp = FastifyInstance

// A client-supplied `x-request-id` is kept when it is short and plain, so a caller can correlate
// its own logs; anything else gets a fresh id.
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/

function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id']
  if (typeof given === 'string' && CLIENT_REQUEST_ID.test(given) && redactSecrets(given) === given) return given
  return randomUUID()
}

/**
 * Create the server's fastify instance with JSON-only body parsing, request ids (echoed in
 * `x-request-id`), @fastify/sse, the error and not-found handlers of both API families, and
 * `GET /health`, `/info` and `/metrics`, and the OpenAPI document of every route (`/openapi.json`,
 * Swagger UI at `/docs`).
 *
 * Later modules add routes with `app.register(plugin)`: the error handlers are set on the root
 * before any of them, so every route gets Loom's error shapes, and @fastify/sse is loaded by the
 * time this resolves, so a route may declare `sse: 'manual'`. Mark generation routes with
 * `config: { generation: true }` to have them counted in `loom_request_*`, and document each with
 * `config: { openapi: … }` (a `RouteDoc`).
 */
export async function createHttpApp(deps: HttpAppDeps): Promise<HttpApp> {
  const timeouts = deps.config.timeouts ?? DEFAULT_HTTP_TIMEOUTS
  const app = Fastify({
    loggerInstance: deps.logger,
    bodyLimit: deps.config.bodyLimit,
    genReqId: requestIdOf,
    // Requests arriving while the server drains get Loom's `server_closing` error, not fastify's body.
    return503OnClosing: false,
    ...serverTimeoutOptions(timeouts),
    // Requests Node's parser cannot frame, and requests that do not arrive in time, answer in
    // Loom's shape of their API family, not fastify's.
    clientErrorHandler: clientErrorHandler({
      headersTimeoutMs: timeouts.headersMs,
      requestTimeoutMs: timeouts.requestMs,
      logger: deps.logger,
    }),
  }) as unknown as HttpApp

  app.decorate('loomMetrics', deps.metrics)
  app.decorate('loomBodyLimit', deps.config.bodyLimit)
  installJsonBodyParser(app)
  installErrorHandlers(app, deps.config.bodyLimit)

  let closing = false
  app.addHook('preClose', async () => {
    closing = true
  })
  app.addHook('onRequest', async (request, reply) => {
    void reply.header('x-request-id', request.id)
    // A client that asked to close (`Connection: close`, HTTP/1.0) gets `Connection: close` back
    // on every answer, streams included: @fastify/sse writes `keep-alive` but lets reply headers
    // override it. Answering keep-alive made clients reuse a socket Node's parser had closed, and
    // their next request failed as malformed. Draining, the server asks every client to close.
    if (!reply.raw.shouldKeepAlive || closing) void reply.header('connection', 'close')
    if (closing) throw new LoomError('server_closing')
    if (request.routeOptions.config.generation === true) deps.metrics.requestStarted()
  })

  await app.register(fastifySSE, { heartbeatInterval: deps.config.sseHeartbeatMs ?? 15_000 })
  await registerOpenApi(app)
  registerSystemRoutes(app, deps)
  return app
}
