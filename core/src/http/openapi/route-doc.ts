import type { FastifySchema } from 'fastify'
import type {} from '@fastify/swagger'
import type { JsonSchema } from './json-schema.ts'

/**
 * A route's OpenAPI description, in @fastify/swagger's route-schema form (`summary`, `tags`,
 * `body`, `params`, `response` by status, …) plus `url`, the documented path where fastify's
 * differs (`/v1/models/*` is documented as `/v1/models/{id}`).
 *
 * Routes put it on `config.openapi`, never on fastify's `schema`: Loom's hand-written parsers
 * validate bodies (their messages name the field, the limit and the value: docs/errors.md), and
 * handlers serialize their own answers. On `schema`, fastify would compile these documents into an
 * ajv validator and a response serializer that strips unknown fields; on `config` they are data
 * that only `registerOpenApi`'s transform reads.
 */
export interface RouteDoc extends FastifySchema {
  readonly url?: string
  readonly operationId: string
  readonly summary: string
  readonly tags: readonly string[]
  readonly response: Readonly<Record<string, JsonSchema>>
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route's OpenAPI description (documentation only; see `RouteDoc`). */
    openapi?: RouteDoc
  }
}
