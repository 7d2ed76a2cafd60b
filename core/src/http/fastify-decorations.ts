import type { Metrics } from '../metrics/create-metrics.ts'

/**
 * What `createHttpApp` adds to fastify's types. Route modules registered later read these.
 */
declare module 'fastify' {
  interface FastifyInstance {
    /** The server's metrics, for routes to record requests. */
    readonly loomMetrics: Metrics
    /** The server-wide body limit in bytes (a route may set a smaller `bodyLimit`). */
    readonly loomBodyLimit: number
  }
  interface FastifyContextConfig {
    /**
     * Mark a generation route (`/generate`, `/v1/chat/completions`, …): each request increments
     * `loom_request_count` on arrival and each error `loom_request_failure{err}`; the route itself
     * reports success with `metrics.requestSucceeded(...)`.
     */
    generation?: boolean
  }
}

export {}
