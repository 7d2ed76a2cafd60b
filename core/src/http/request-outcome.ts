import type { FastifyRequest } from 'fastify'
import type { Metrics } from '../metrics/create-metrics.ts'

/** Generation requests whose outcome has been counted. Weak: a finished request is not kept alive. */
const counted = new WeakSet<FastifyRequest>()

/**
 * Count the one outcome of a generation request (`config: { generation: true }`): success,
 * failure or cancellation. The first call counts and returns true; later calls count nothing and
 * return false. A request can meet more than one ending (a client that leaves while its last
 * token is being written, a choice's failure racing the client's hang-up), and
 * `loom_request_count` must equal the sum of the outcomes. Non-generation routes count nothing.
 */
export function countOutcome(request: FastifyRequest, count: (metrics: Metrics) => void): boolean {
  if (request.routeOptions.config.generation !== true || counted.has(request)) return false
  counted.add(request)
  count(request.server.loomMetrics)
  return true
}
