/**
 * Turns a `merged_adapters` request into a loaded adapter: key the merge by its inputs, reuse the
 * cached result (in memory, else on disk), or read the inputs, merge them, write the result into
 * the adapter cache as a PEFT adapter, and load it through the backend like any other adapter.
 * Identical merges in flight at the same moment share one computation.
 */
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { mkdir, rename, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { AdapterHandle, LocalAdapter, ResolvedAdapter } from '../../contracts/adapter.ts'
import type { Backend, BackendCapabilities } from '../../contracts/backend.ts'
import type { Logger } from '../../contracts/logger.ts'
import type { LoraWeights, ModelSpec } from '../../contracts/step-runner.ts'
import { LoomError } from '../../errors/index.ts'
import { projectionShape } from '../projection-shape.ts'
import { readLoraAdapter } from '../read-lora.ts'
import { mergeIdentity, mergeKey } from './merge-key.ts'
import { mergeLoraWeightsInWorker } from './merge-in-worker.ts'
import { MergeQueue } from './merge-queue.ts'
import type { MergedAdaptersRequest } from './merge-params.ts'
import { writePeftAdapter } from './write-peft-adapter.ts'

/** The `adapter_source` code merged adapters carry in handles, keys and cache paths. */
export const MERGE_SOURCE = 'merge'
/** Written last into a merged adapter's directory: its identity; present means complete. */
const IDENTITY_FILE = '.loom-merge.json'

/** An input adapter, resolved and on local disk. */
export interface MergeInput {
  readonly resolved: ResolvedAdapter
  readonly dir: string
}

export interface AdapterMergerDeps {
  readonly backend: Backend
  /** Where the merged adapter with this identity lives (the adapter cache's path for it). */
  readonly pathFor: (resolved: ResolvedAdapter) => string
  readonly logger: Logger
}

/** Process-wide merge counters. */
export interface MergeStats {
  /** Merges computed (inputs read, merged and written). */
  readonly computed: number
  /** Merges found complete in the disk cache (no computation). */
  readonly diskHits: number
  /** Requests served by a merge already loaded or in flight in this process. */
  readonly memoryHits: number
}

const counters = { computed: 0, diskHits: 0, memoryHits: 0 }

/** How many merges were computed or reused since the process started (tests, diagnostics). */
export function mergeStats(): MergeStats {
  return { ...counters }
}

/** The model facts the LoRA reader checks adapters against, from the backend's capabilities. */
function specFrom(caps: BackendCapabilities): ModelSpec {
  const shape = caps.modelShape
  const num = (key: string): number => {
    const value = shape[key]
    if (typeof value !== 'number') {
      throw new LoomError('adapter_invalid', {
        id: 'merged_adapters',
        detail: `the backend does not report the model's ${key}, which merging needs`,
      })
    }
    return value
  }
  return {
    architecture: String(shape.architecture ?? ''),
    dtype: caps.dtype,
    device: caps.device,
    vocabSize: caps.vocabSize,
    hiddenSize: num('hidden_size'),
    intermediateSize: num('intermediate_size'),
    numLayers: num('num_hidden_layers'),
    numHeads: num('num_attention_heads'),
    numKvHeads: num('num_key_value_heads'),
    headDim: num('head_dim'),
    maxContextLength: caps.maxContextLength,
    // Not used by the reader.
    kvBlockSize: 0,
    kvBlockCount: 0,
    adapterSlots: 0,
    maxLoraRank: caps.maxLoraRank,
  }
}

/** Distinct merges computed at once (see `MergeQueue`). */
const MAX_CONCURRENT_MERGES = 1

export class AdapterMerger {
  readonly #deps: AdapterMergerDeps
  readonly #loading = new Map<string, Promise<{ handle: AdapterHandle; dir: string }>>()
  readonly #closed = new AbortController()
  readonly #queue = new MergeQueue(MAX_CONCURRENT_MERGES)

  constructor(deps: AdapterMergerDeps) {
    this.#deps = deps
  }

  /** Server shutdown: merges computing or waiting stop with `server_closing`. */
  close(): void {
    this.#closed.abort(new LoomError('server_closing'))
    this.#queue.close()
  }

  /** The merged adapter of `inputs` (in request order) as `request` describes, loaded. */
  acquire(
    inputs: readonly MergeInput[],
    request: MergedAdaptersRequest,
  ): Promise<{ handle: AdapterHandle; dir: string }> {
    const caps = this.#deps.backend.capabilities()
    if (caps.maxLoraRank <= 0) {
      throw new LoomError('adapter_invalid', {
        id: 'merged_adapters',
        detail: 'this backend cannot load LoRA adapters',
      })
    }
    const identity = mergeIdentity(
      inputs.map((i) => i.resolved),
      request,
      caps.maxLoraRank,
    )
    const key = mergeKey(identity)
    const pending = this.#loading.get(key)
    if (pending) {
      counters.memoryHits++
      return pending
    }
    const loading = this.#load(inputs, request, identity, key, caps)
    // A failed merge is not remembered: the next request retries.
    loading.catch(() => this.#loading.delete(key))
    this.#loading.set(key, loading)
    return loading
  }

  async #load(
    inputs: readonly MergeInput[],
    request: MergedAdaptersRequest,
    identity: Record<string, unknown>,
    key: string,
    caps: BackendCapabilities,
  ): Promise<{ handle: AdapterHandle; dir: string }> {
    const resolved: ResolvedAdapter = { source: MERGE_SOURCE, id: key, revision: `v${identity.format}`, files: [] }
    const dir = this.#deps.pathFor(resolved)
    if (existsSync(join(dir, IDENTITY_FILE))) counters.diskHits++
    else await this.#compute(inputs, request, identity, key, caps, dir)
    const local: LocalAdapter = { resolved: { ...resolved, localDir: dir }, dir, kind: 'lora' }
    return { handle: await this.#deps.backend.loadAdapter(local), dir }
  }

  async #compute(
    inputs: readonly MergeInput[],
    request: MergedAdaptersRequest,
    identity: Record<string, unknown>,
    key: string,
    caps: BackendCapabilities,
    dir: string,
  ): Promise<void> {
    const started = performance.now()
    const spec = specFrom(caps)
    const parsed: LoraWeights[] = []
    for (const input of inputs) {
      const id = input.resolved.id
      if (!existsSync(join(input.dir, 'adapter_config.json'))) {
        throw new LoomError('adapter_invalid', {
          id,
          detail: 'only LoRA adapters (with adapter_config.json) can be merged',
        })
      }
      parsed.push(await readLoraAdapter(input.dir, id, spec))
    }
    // On a worker thread: the SVDs of a large merge would otherwise stall every other request.
    const { weights, report } = await this.#queue.run(() =>
      mergeLoraWeightsInWorker(
        parsed,
        request,
        key,
        { maxRank: caps.maxLoraRank, shape: (module) => projectionShape(spec, module) },
        this.#closed.signal,
      ),
    )
    if (report.modules === 0) {
      throw new LoomError('adapter_invalid', {
        id: key,
        detail: `the ${request.strategy} merge of ${inputs.map((i) => i.resolved.id).join(', ')} leaves no weights (every entry was pruned or cancelled out)`,
      })
    }
    // Written beside the final directory and renamed into place: a crash never leaves a partial merge.
    const tmp = `${dir}.tmp-${randomBytes(6).toString('hex')}`
    await mkdir(tmp, { recursive: true })
    try {
      await writePeftAdapter(tmp, weights, { base_model_name_or_path: null, loom_merge: identity })
      await writeFile(join(tmp, IDENTITY_FILE), JSON.stringify({ key, ...identity, report }, null, 2))
      await rename(tmp, dir).catch(async (err: NodeJS.ErrnoException) => {
        // Another process finished the same merge first: its result is identical, keep it.
        if ((err.code === 'ENOTEMPTY' || err.code === 'EEXIST') && existsSync(join(dir, IDENTITY_FILE))) return
        throw err
      })
    } finally {
      await rm(tmp, { recursive: true, force: true })
    }
    counters.computed++
    const level = report.maxRelativeError > 1e-3 ? 'warn' : 'info'
    this.#deps.logger[level](
      {
        merge: key,
        inputs: inputs.map((i) => i.resolved.id),
        strategy: request.strategy,
        modules: report.modules,
        maxRank: report.maxRank,
        maxRelativeError: report.maxRelativeError,
        seconds: (performance.now() - started) / 1000,
      },
      'computed merged adapter',
    )
  }
}
