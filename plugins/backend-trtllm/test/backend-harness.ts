/**
 * A `TrtllmBackend` on the addon built against the fake executor, over a testkit model and an
 * engine `config.json` written for it, with every request the backend enqueues recorded.
 */
import { join } from 'node:path'
import type { BackendRequest, LocalAdapter, Logger } from '@loom/core'
import { buildLoraAdapter, buildModel, type BuildLoraOptions, type HfModelConfig } from '@loom/testkit'
import { loadTrtllm } from '../src/load-native.ts'
import {
  fakeToken,
  type NativeExecutor,
  type NativeExecutorOptions,
  type NativeRequest,
  type TrtllmAddon,
} from '../src/native-api.ts'
import { TrtllmBackend } from '../src/trtllm-backend.ts'
import { trtllmOptionsSchema, type TrtllmOptionsInput } from '../src/trtllm-options.ts'
import { writeEngineConfig, type EngineFixtureOptions } from './engine-fixture.ts'

/** A logger that keeps what it is given. */
export function memoryLogger(lines: { level: string; msg: string; obj: object }[] = []): Logger {
  const log =
    (level: string) =>
    (obj: object, msg?: string): void => {
      lines.push({ level, msg: msg ?? '', obj })
    }
  const logger: Logger = {
    debug: log('debug'),
    info: log('info'),
    warn: log('warn'),
    error: log('error'),
    child: () => logger,
  }
  return logger
}

/**
 * The addon with every `create` and `enqueue` recorded (the executor itself is the real fake).
 * `pretendGuided` claims guided decoding, which the fake lacks: the schema and vocabulary are
 * recorded and not passed on, so the backend's side of guided decoding can be checked.
 */
export function recordingAddon(
  addon: TrtllmAddon,
  pretendGuided = false,
): {
  addon: TrtllmAddon
  enqueued: NativeRequest[]
  created: NativeExecutorOptions[]
} {
  const enqueued: NativeRequest[] = []
  const created: NativeExecutorOptions[] = []
  const strip = pretendGuided && !addon.capabilities.guidedDecoding
  return {
    enqueued,
    created,
    addon: {
      capabilities: { ...addon.capabilities, guidedDecoding: addon.capabilities.guidedDecoding || pretendGuided },
      async create(options, onResponses) {
        created.push(options)
        const { guidedDecoding: _vocab, ...withoutVocab } = options
        const executor = await addon.create(strip ? withoutVocab : options, onResponses)
        const recording: NativeExecutor = {
          enqueue(request) {
            const { guidedJsonSchema: _schema, ...withoutSchema } = request
            const id = executor.enqueue(strip ? withoutSchema : request)
            enqueued.push(request)
            return id
          },
          cancel: (id) => executor.cancel(id),
          stats: () => executor.stats(),
          info: () => executor.info(),
          shutdown: () => executor.shutdown(),
        }
        return recording
      },
    },
  }
}

export interface Harness {
  readonly backend: TrtllmBackend
  readonly model: HfModelConfig
  readonly dir: string
  readonly enqueued: NativeRequest[]
  /** The executor options the backend started with. */
  readonly created: NativeExecutorOptions[]
  readonly logs: { level: string; msg: string; obj: object }[]
  /** Build a PEFT adapter for the model and load it. */
  lora(name: string, opts?: Omit<BuildLoraOptions, 'model'>): Promise<LocalAdapter>
}

/** Start a backend on the fake in `dir` (a `t.testdir()`); the caller closes it. */
export async function startHarness(
  dir: string,
  options: Omit<TrtllmOptionsInput, 'engine_dir'> = {},
  engine: EngineFixtureOptions = {},
  pretendGuided = false,
): Promise<Harness> {
  const model = await buildModel(join(dir, 'model'), { numLayers: 2, hiddenSize: 32, intermediateSize: 48 })
  const engineDir = writeEngineConfig(join(dir, 'engine'), model, engine)
  const { addon, enqueued, created } = recordingAddon(loadTrtllm(), pretendGuided)
  const logs: Harness['logs'] = []
  const backend = new TrtllmBackend({
    addon,
    engineDir,
    modelDir: join(dir, 'model'),
    options: trtllmOptionsSchema.parse({ engine_dir: engineDir, allow_fake: true, ...options }),
    logger: memoryLogger(logs),
  })
  await backend.start()
  return {
    backend,
    model,
    dir,
    enqueued,
    created,
    logs,
    async lora(name, opts = {}) {
      const loraDir = join(dir, 'adapters', name)
      await buildLoraAdapter(loraDir, { model, rank: 4, targetModules: ['q_proj', 'v_proj'], ...opts })
      return {
        resolved: { source: 'local', id: name, revision: 'r1', files: [], localDir: loraDir },
        dir: loraDir,
        kind: 'lora',
      }
    },
  }
}

// The core engine tests' request builder and stream readers serve here unchanged.
export { collect, idsOf as tokenIds, makeRequest as backendRequest } from '../../../core/test/engine/engine-fixtures.ts'

/**
 * The tokens the fake generates for `request` (greedy: temperature 1 as the mapping sends it), with
 * `taskId` for its LoRA (0 for the base model).
 */
export function expectedTokens(request: BackendRequest, vocabSize: number, taskId = 0, count?: number): number[] {
  // Greedy goes as top-1 at temperature 1, without a seed (see the mapping).
  const greedy = request.sampling.temperature === 0
  const temperature = greedy ? 1 : request.sampling.temperature
  const seed = greedy ? 0n : request.sampling.seed
  return Array.from(
    { length: count ?? request.maxNewTokens },
    (_, position) => fakeToken({ inputIds: request.inputIds, taskId, seed, temperature, position }, vocabSize).token,
  )
}
