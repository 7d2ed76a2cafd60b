import type { FastifyReply, FastifyRequest } from 'fastify'
import { LoomError } from '../errors/loom-error.ts'
import { errorFamily } from './error-family.ts'
import { reportError } from './report-error.ts'

/**
 * End a stream that has already started with an error event in the request's API family, as
 * LoRAX and OpenAI clients expect: native `data: {"error","error_type"}`, OpenAI
 * `data: {"error":{message,type,param,code}}` (the OpenAI SDK raises it as an `APIError`). The
 * error is logged and counted like any other; internal details stay in the log.
 *
 * For routes registered with `sse` (@fastify/sse); the route returns after this resolves, which
 * closes the stream. Does nothing on the wire when the client has gone.
 */
export async function sendStreamError(request: FastifyRequest, reply: FastifyReply, err: unknown): Promise<void> {
  const server = request.server
  const loomError = reportError(request, err, server.loomBodyLimit)
  if (reply.sse?.isConnected !== true) return
  await reply.sse.send({ data: errorFamily(request.url).payload(loomError) })
}

/**
 * A stream whose client went away before its end: logged and counted once as `request_cancelled`
 * (info level, `loom_request_cancelled`), like a cancellation the engine reports, so every request
 * ends with exactly one outcome.
 */
export function reportStreamCancelled(request: FastifyRequest): void {
  reportError(request, new LoomError('request_cancelled'), request.server.loomBodyLimit)
}
