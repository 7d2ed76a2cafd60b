import type { FastifyRequest } from 'fastify'
import { LoomError } from '../../errors/index.ts'
import type { RequestLimits } from '../../generation/generation-request.ts'
import type { GenerationService } from '../../generation/generation-service.ts'
import type { KnownAdapter } from '../../adapters/adapter-manager.ts'
import type { DownloadStatus } from '../../adapters/download-progress.ts'
import { bearerToken } from '../bearer-token.ts'
import type { OpenAiParseContext } from './parse-openai-common.ts'

/** What the v1 routes need from the server. */
export interface OpenAiRouteDeps {
  /** The generation service and limits, or null while the model is loading (requests get 503). */
  readonly state: () => {
    readonly generation: GenerationService
    readonly limits: RequestLimits
    readonly knownAdapters: () => Promise<readonly KnownAdapter[]>
    /** Adapter downloads in flight, for `/v1/models/{id}`. */
    readonly downloads: () => readonly DownloadStatus[]
  } | null
  readonly defaultSource: string
  readonly modelId: string
  /** Unix seconds when the model was loaded (`created` in `/v1/models`). */
  readonly createdAt: number
}

export function servingState(deps: OpenAiRouteDeps) {
  const state = deps.state()
  if (!state) throw new LoomError('backend_not_ready')
  return state
}

export function parseContext(deps: OpenAiRouteDeps, request: FastifyRequest): OpenAiParseContext {
  return {
    modelId: deps.modelId,
    defaultSource: deps.defaultSource,
    bearerToken: bearerToken(request),
    limits: servingState(deps).limits,
  }
}
