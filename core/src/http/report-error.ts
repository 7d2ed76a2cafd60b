import type { FastifyRequest } from 'fastify'
import { ERRORS } from '../errors/registry.ts'
import { isLoomError, type LoomError } from '../errors/loom-error.ts'
import { countOutcome } from './request-outcome.ts'
import { toLoomError } from './to-loom-error.ts'

/**
 * The one place a failed request is turned into a `LoomError`, logged and counted, for both the
 * error handler (errors before a response starts) and `sendStreamError` (errors after).
 */
export function reportError(request: FastifyRequest, err: unknown, defaultBodyLimit: number): LoomError {
  const loomError = toLoomError(err, {
    requestId: request.id,
    bodyLimit: request.routeOptions.bodyLimit ?? defaultBodyLimit,
    contentType: request.headers['content-type'],
    body: request.body,
  })
  const first = countOutcome(request, (metrics) => {
    if (loomError.code === 'request_cancelled') metrics.requestCancelled()
    else metrics.requestFailed(ERRORS[loomError.code].nativeType)
  })
  const generation = request.routeOptions.config.generation === true
  if (generation && !first) {
    // The request already ended (the client left, or its success was counted): a second ending
    // is a detail of that one, not another event to report.
    request.log.debug({ code: loomError.code }, `after the request ended: ${loomError.message}`)
  } else if (!isLoomError(err) && loomError.code === 'internal_error') {
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
  return loomError
}
