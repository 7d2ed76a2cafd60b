import type { FastifyInstance } from 'fastify'
import { LoomError } from '../errors/loom-error.ts'
import type { Metrics } from '../metrics/create-metrics.ts'
import type { InfoResponse } from './info-response.ts'
import { healthDoc, infoDoc, metricsDoc } from './openapi/system-docs.ts'

export interface SystemRoutesDeps {
  isReady(): boolean
  info(): InfoResponse
  metrics: Metrics
}

/**
 * `GET /health`, `GET /info` and `GET /metrics`.
 *
 * `/health` answers like LoRAX: 200 with an empty body once the model is loaded, and before that
 * 503 with the native error body (`error_type: "unhealthy"`). `/info` is 503 the same way until
 * the model is loaded, since its facts come from the loaded backend. `/metrics` always answers.
 */
export function registerSystemRoutes(app: FastifyInstance, deps: SystemRoutesDeps): void {
  const notReady = () => new LoomError('backend_not_ready')

  app.get('/health', { config: { openapi: healthDoc } }, async (_request, reply) => {
    if (!deps.isReady()) throw notReady()
    return reply.code(200).send()
  })

  app.get('/info', { config: { openapi: infoDoc } }, async () => {
    if (!deps.isReady()) throw notReady()
    return deps.info()
  })

  app.get('/metrics', { config: { openapi: metricsDoc } }, async (_request, reply) => {
    const text = await deps.metrics.registry.metrics()
    return reply.type(deps.metrics.registry.contentType).send(text)
  })
}
