import type { FastifyRequest } from 'fastify'
import { LoomError } from '../errors/index.ts'
import { isWellFormedCredential } from '../validation/fields.ts'

/** The token of an `Authorization: Bearer <token>` header, if any. Used for private adapters, never for server access. */
export function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization
  if (typeof header !== 'string') return undefined
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
  const token = match?.[1]
  // Refused here, never quoted: forwarded to a hub, such a token fails inside fetch with an
  // error that repeats it.
  if (token !== undefined && !isWellFormedCredential(token)) {
    throw new LoomError('bad_request', {
      detail: "the Authorization header's Bearer token must contain only visible ASCII characters (value not shown)",
    })
  }
  return token
}
