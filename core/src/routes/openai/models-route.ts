import type { FastifyInstance } from 'fastify'
import { LoomError } from '../../errors/index.ts'
import { listModelsDoc, retrieveModelDoc } from '../../http/openapi/openai-docs.ts'
import type { DownloadStatus } from '../../adapters/download-progress.ts'
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
    ...adapters.map((a) => adapterEntry(deps, a)),
  ]
}

function adapterEntry(deps: OpenAiRouteDeps, a: { id: string; source: string; revision: string | null }) {
  return {
    id: a.id,
    object: 'model',
    created: deps.createdAt,
    owned_by: 'loom',
    parent: deps.modelId,
    adapter_source: a.source,
    revision: a.revision,
  }
}

/** A download in flight, as `/v1/models/{id}` shows it. */
function downloadJson(d: DownloadStatus) {
  return {
    status: 'downloading',
    bytes: d.bytes,
    total_bytes: d.totalBytes,
    percent: d.percent,
    bytes_per_second: d.bytesPerSecond,
    eta_s: d.etaSeconds,
    started_at: d.startedAt,
  }
}

/**
 * `GET /v1/models` (the list) and `GET /v1/models/{id}` (one entry of it). Ids may hold slashes
 * (hub ids are `org/name`), sent as is or encoded (`org%2Fname`, as the SDKs send them), so the id is
 * the whole rest of the path. When two sources know the same id, the first listed is answered. An id
 * the list leaves out (a Medusa head's) is a 404, as in vLLM, so retrieving agrees with listing;
 * except an adapter being downloaded right now, shown with `download` (bytes, total, rate, ETA).
 */
export function modelsRoute(deps: OpenAiRouteDeps) {
  return async function register(app: FastifyInstance): Promise<void> {
    app.get('/v1/models', { config: { openapi: listModelsDoc } }, async () => ({
      object: 'list',
      data: await modelEntries(deps),
    }))
    app.get('/v1/models/*', { config: { openapi: retrieveModelDoc } }, async (request) => {
      const id = (request.params as { '*': string })['*']
      const entry = (await modelEntries(deps)).find((m) => m.id === id)
      // An adapter being fetched (a first request for a large hub adapter) is shown with its progress.
      const download = deps
        .state()
        ?.downloads()
        .find((d) => d.id === id)
      if (!entry && !download) throw new LoomError('model_not_found', { id }, { param: 'model' })
      if (!download) return entry
      return { ...(entry ?? adapterEntry(deps, download)), download: downloadJson(download) }
    })
  }
}
