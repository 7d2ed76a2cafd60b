import type { FastifyRequest } from 'fastify'

/** The token of an `Authorization: Bearer <token>` header, if any. Used for private adapters, never for server access. */
export function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization
  if (typeof header !== 'string') return undefined
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
  return match?.[1]
}
