import type { FastifyInstance } from 'fastify'
import { LoomError } from '../errors/loom-error.ts'
import { pathOf } from './api-family.ts'
import { errorFamily } from './error-family.ts'
import { reportError } from './report-error.ts'

/** Methods a route may be registered under, for the `Allow` header of a 405. */
const ROUTE_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const

/**
 * Install the error and not-found handlers on the root instance. Set before any route plugin is
 * registered, they are inherited by every plugin registered later (unless a plugin sets its own).
 */
export function installErrorHandlers(app: FastifyInstance, bodyLimit: number): void {
  app.setErrorHandler((err, request, reply) => {
    const loomError = reportError(request, err, bodyLimit)
    const family = errorFamily(request.url)
    if (reply.raw.headersSent) {
      // A stream had started: the status line is gone. Routes should end streams with
      // `sendStreamError`; this is the fallback for one that threw instead.
      if (!reply.raw.writableEnded) {
        if (String(reply.raw.getHeader('content-type') ?? '').startsWith('text/event-stream')) {
          reply.raw.write(`data: ${JSON.stringify(family.payload(loomError))}\n\n`)
        }
        reply.raw.end()
      }
      return
    }
    void reply.code(loomError.status).type('application/json; charset=utf-8').send(family.payload(loomError))
  })

  app.setNotFoundHandler((request, reply) => {
    // The path only: a query string may carry a token, and the message is logged.
    const url = pathOf(request.url)
    const params = { method: request.method, url: url.length > 200 ? `${url.slice(0, 197)}...` : url }
    // The path exists under other methods (`GET /generate`): 405 with `Allow`, as HTTP asks.
    const allowed = ROUTE_METHODS.filter((method) => app.hasRoute({ method, url }))
    const err =
      allowed.length > 0
        ? new LoomError('method_not_allowed', { ...params, allowed: allowed.join(', ') })
        : new LoomError('route_not_found', params)
    if (allowed.length > 0) void reply.header('allow', allowed.join(', '))
    request.log.info({ code: err.code, status: err.status }, err.message)
    void reply.code(err.status).type('application/json; charset=utf-8').send(errorFamily(request.url).payload(err))
  })
}
