import type { FastifyReply } from 'fastify'

/**
 * An AbortSignal that fires when the client goes away before the response is complete, so the
 * backend frees the request's KV memory at once instead of generating for nobody.
 */
export function abortOnDisconnect(reply: FastifyReply): AbortController {
  const controller = new AbortController()
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) controller.abort(new Error('client disconnected'))
  })
  return controller
}
