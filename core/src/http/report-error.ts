import type { FastifyRequest } from 'fastify'
import { ERRORS } from '../errors/registry.ts'
import { isLoomError, type LoomError } from '../errors/loom-error.ts'
import type { Metrics } from '../metrics/create-metrics.ts'
import { toLoomError } from './to-loom-error.ts'

/**
 * The one place a failed request is turned into a `LoomError`, logged and counted, for both the
 * error handler (errors before a response starts) and `sendStreamError` (errors after).
 */
export function reportError(
  request: FastifyRequest,
  err: unknown,
  metrics: Metrics,
  defaultBodyLimit: number,
): LoomError {
  const loomError = toLoomError(err, {
    requestId: request.id,
    bodyLimit: request.routeOptions.bodyLimit ?? defaultBodyLimit,
    contentType: request.headers['content-type'],
    body: request.body,
  })
  if (!isLoomError(err) && loomError.code === 'internal_error') {
    // The only record of what really happened: the client sees the request id alone.
    request.log.error({ err }, 'unhandled error')
  } else if (loomError.status === 503) {
    // Unavailable (slots full, a source down, shutting down): a condition to watch, not a fault
    // with a stack worth printing.
    request.log.warn({ code: loomError.code, status: loomError.status, param: loomError.param }, loomError.message)
  } else if (loomError.status >= 500) {
    request.log.error({ err: loomError, code: loomError.code }, loomError.message)
  } else {
    request.log.info({ code: loomError.code, status: loomError.status, param: loomError.param }, loomError.message)
  }
  if (request.routeOptions.config.generation === true) {
    if (loomError.code === 'request_cancelled') metrics.requestCancelled()
    else metrics.requestFailed(ERRORS[loomError.code].nativeType)
  }
  return loomError
}
