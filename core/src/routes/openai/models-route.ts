import type { FastifyInstance } from 'fastify'
import { LoomError } from '../../errors/index.ts'
import type { OpenAiRouteDeps } from './openai-route-deps.ts'

/**
 * The models this server answers for, in `/v1/models` order: the base model, then the LoRA adapters
 * it offers every caller (local roots, preloaded; see `AdapterManager.known`). Medusa heads are not
 * models (vLLM lists only the base model and LoRAs): the server leaves them out of `knownAdapters`
 * and `/info` names its default ones. Adapter entries carry `adapter_source`, so a client can
 * address them with `model` + `adapter_source`.
 */
async function modelEntries(deps: OpenAiRouteDeps) {
  const adapters = (await deps.state()?.knownAdapters()) ?? []
  return [
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
  ]
}

/**
 * `GET /v1/models` (the list) and `GET /v1/models/{id}` (one entry of it). Ids may hold slashes
 * (hub ids are `org/name`), sent as is or encoded (`org%2Fname`, as the SDKs send them), so the id is
 * the whole rest of the path. When two sources know the same id, the first listed is answered. An id
 * the list leaves out (a Medusa head's) is a 404, as in vLLM, so retrieving agrees with listing.
 */
export function modelsRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    app.get('/v1/models', async () => ({ object: 'list', data: await modelEntries(deps) }))
    app.get('/v1/models/*', async (request) => {
      const id = (request.params as { '*': string })['*']
      const entry = (await modelEntries(deps)).find((m) => m.id === id)
      if (!entry) throw new LoomError('model_not_found', { id }, { param: 'model' })
      return entry
    })
  }
}
