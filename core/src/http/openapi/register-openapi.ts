import fastifySwagger, { type SwaggerTransform } from '@fastify/swagger'
import fastifySwaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import { LOOM_VERSION } from '../../version.ts'
import { NATIVE_SCHEMAS } from './native-schemas.ts'
import { OPENAI_SCHEMAS } from './openai-schemas.ts'
import { SYSTEM_SCHEMAS, openApiDoc } from './system-docs.ts'
import type {} from './route-doc.ts'

/** Where the document and its Swagger UI are served. */
export const OPENAPI_PATH = '/openapi.json'
export const DOCS_PREFIX = '/docs'

/**
 * A route is documented by its `config.openapi` (see `RouteDoc`), which fastify never compiles;
 * routes without one keep their own `schema` (Swagger UI's are `hide`). The document is built once
 * per app and cached, and swagger edits what it is given, so it gets copies of the shared docs.
 */
const transform: SwaggerTransform = ({ schema, url, route }) => {
  const doc = route.config?.openapi
  if (doc === undefined) return { schema, url }
  const { url: documented, ...rest } = structuredClone(doc)
  return { schema: rest, url: documented ?? url }
}

/**
 * Publish the OpenAPI 3.1 description of every route at `GET /openapi.json`, with Swagger UI at
 * `/docs` (its assets ship in @fastify/swagger-ui: nothing is fetched from the network). Call before
 * any route is added: swagger collects routes as they are registered.
 */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Loom',
        version: LOOM_VERSION,
        description:
          "One base model, any number of LoRA and Medusa adapters per request. LoRAX's native API and the " +
          'OpenAI v1 API (`baseURL: http://host:port/v1`). Errors have stable codes: docs/errors.md.',
      },
      tags: [
        { name: 'native', description: "LoRAX's API: `/generate`, `/generate_stream`, `POST /`." },
        { name: 'openai', description: 'The OpenAI-compatible API under `/v1`.' },
        { name: 'system', description: 'Readiness, facts, metrics and this document.' },
      ],
      components: { schemas: structuredClone({ ...NATIVE_SCHEMAS, ...OPENAI_SCHEMAS, ...SYSTEM_SCHEMAS }) },
    },
    transform,
  })
  await app.register(fastifySwaggerUi, { routePrefix: DOCS_PREFIX })
  app.get(OPENAPI_PATH, { config: { openapi: openApiDoc } }, async () => app.swagger())
}
