import type { FastifyInstance } from 'fastify'
import type { OpenAiRouteDeps } from './openai-route-deps.ts'

/**
 * `GET /v1/models`: the base model, then every adapter this server knows (preloaded, loaded or
 * resolved since start). Adapter entries carry `adapter_source`, so a client can address them with
 * `model` + `adapter_source`.
 */
export function modelsRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    app.get('/v1/models', async () => {
      const adapters = (await deps.state()?.knownAdapters()) ?? []
      return {
        object: 'list',
        data: [
          { id: deps.modelId, object: 'model', created: deps.createdAt, owned_by: 'loom' },
          ...adapters.map((a) => ({
            id: a.id,
            object: 'model',
            created: deps.createdAt,
            owned_by: 'loom',
            parent: deps.modelId,
            adapter_source: a.source,
            revision: a.revision,
          })),
        ],
      }
    })
  }
}
