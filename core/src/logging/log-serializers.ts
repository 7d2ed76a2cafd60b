import { stdSerializers } from 'pino'
import { redactObject } from './redact-object.ts'
import { redactSecrets } from './redact-secrets.ts'

/**
 * pino serializers for the values fastify and Loom log under `req`, `res` and `err`. They replace
 * fastify's defaults (fastify merges a logger instance's serializers over its own) and never emit
 * headers or bodies.
 */

/** The parts of a fastify request (or a raw `IncomingMessage`) that the request serializer reads. */
interface RequestLike {
  method?: string
  url?: string
  host?: string
  ip?: string
  socket?: { remotePort?: number } | null
}

/** `req` → method, URL without secrets, host and peer address. Headers are never logged. */
export function serializeRequest(req: unknown): Record<string, unknown> {
  if (req === null || typeof req !== 'object') return { value: typeof req }
  const r = req as RequestLike
  return {
    method: r.method,
    url: typeof r.url === 'string' ? redactSecrets(r.url) : undefined,
    host: r.host,
    remoteAddress: r.ip,
    remotePort: r.socket?.remotePort,
  }
}

/** `res` → the status code only. */
export function serializeReply(res: unknown): Record<string, unknown> {
  if (res === null || typeof res !== 'object') return { value: typeof res }
  return { statusCode: (res as { statusCode?: number }).statusCode }
}

/**
 * `err` → pino's standard error record (type, message and stack including causes, enumerable
 * properties) with secrets removed: an upstream client's error may quote a URL with a token, or
 * carry request headers as a property.
 */
export function serializeError(err: unknown): unknown {
  if (!(err instanceof Error)) return redactObject(err)
  // The standard serializer's record has a custom prototype; spread it into a plain object so the
  // redaction walk descends into it.
  return redactObject({ ...stdSerializers.err(err) })
}
