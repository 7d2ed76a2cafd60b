import type { FastifyRequest } from 'fastify'
import { isWellFormedCredential } from '../validation/fields.ts'

/**
 * The token of an `Authorization: Bearer <token>` header, if any. Used for private adapters, never
 * for server access. A header that is not one visible-ASCII Bearer token (spaces inside, bytes
 * outside ASCII) carries no usable credential and is ignored, like an absent one: the base model
 * and public adapters work with any client api key, and forwarded to a hub such a value would
 * fail inside fetch with an error that repeats it. An adapter that needs a token then answers
 * `auth_missing`.
 */
export function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization
  if (typeof header !== 'string') return undefined
  const match = /^Bearer[ \t]+(.+?)[ \t]*$/i.exec(header)
  const token = match?.[1]
  return token !== undefined && isWellFormedCredential(token) ? token : undefined
}
