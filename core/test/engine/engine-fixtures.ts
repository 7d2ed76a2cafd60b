import type { BackendRequest, GenerationEvent, GeneratedToken } from '../../src/contracts/backend.ts'
import type { ResponseFormat, TokenConstraint, TokenConstraintFactory } from '../../src/contracts/grammar.ts'
import type { Logger } from '../../src/contracts/logger.ts'
import { GREEDY_SAMPLING, type SamplingParams } from '../../src/contracts/sampling.ts'
import type { LocalAdapter } from '../../src/contracts/adapter.ts'
import type { LoraWeights, MedusaWeights } from '../../src/contracts/step-runner.ts'
import { BatchingEngine } from '../../src/engine/batching-engine.ts'
import type { BatchingEngineLimits, BatchingEngineOptions } from '../../src/engine/engine-options.ts'
import type { ReadAdapter } from '../../src/engine/adapter-registry.ts'
import { FakeStepRunner, type FakeStepRunnerOptions } from './fake-step-runner.ts'

/** A logger that drops everything (tests assert on behaviour, not log lines). */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  child: () => silentLogger,
}

export const GREEDY: SamplingParams = GREEDY_SAMPLING

let nextId = 0

export function makeRequest(overrides: Partial<BackendRequest> = {}): BackendRequest {
  return {
    id: `req-${++nextId}`,
    inputIds: [1, 2, 3, 4],
    maxNewTokens: 8,
    sampling: GREEDY,
    eosTokenIds: [],
    adapter: null,
    speculator: null,
    grammar: null,
    topLogprobs: 0,
    prefillLogprobs: false,
    signal: new AbortController().signal,
    ...overrides,
  }
}

/** A LoRA of the given rank on layer 0's q_proj (the fake runner never reads the numbers). */
export function fakeLora(key: string, rank = 8): LoraWeights {
  return {
    kind: 'lora',
    key,
    layers: [{ q_proj: { rank, scale: 1, a: new Float32Array(rank * 16), b: new Float32Array(16 * rank) } }],
  }
}

/** Medusa heads for the fake runner (it never reads the numbers; see `medusaAccuracy`). */
export function fakeMedusa(key: string, numHeads = 4): MedusaWeights {
  const block = { weight: new Float32Array(16 * 16), bias: new Float32Array(16) }
  return {
    kind: 'medusa',
    key,
    numHeads,
    numLayers: 1,
    heads: Array.from({ length: numHeads }, () => ({ blocks: [block] })),
  }
}

export function localAdapter(id: string, revision = 'r1'): LocalAdapter {
  return {
    resolved: { source: 'local', id, revision, files: [] },
    dir: `/nonexistent/${id}`,
    kind: 'lora',
  }
}

/** A Medusa adapter whose head count is read from its id: `medusa-3` has 3 heads, others 4. */
export function localMedusa(id: string, revision = 'r1'): LocalAdapter {
  return { ...localAdapter(id, revision), kind: 'medusa' }
}

/** Reads LoRA adapters as `fakeLora` and Medusa adapters as `fakeMedusa`. */
export const readFakeLora: ReadAdapter = async (adapter) => {
  const key = `${adapter.resolved.source}:${adapter.resolved.id}@${adapter.resolved.revision}`
  if (adapter.kind === 'medusa') return fakeMedusa(key, Number(/-(\d+)$/.exec(adapter.resolved.id)?.[1] ?? 4))
  return fakeLora(key)
}

/**
 * The engine's structured-output engine in tests: `grammarFor(matcher)` returns a grammar (data,
 * as requests carry it) for which `create` hands the engine that very matcher.
 */
export class TestConstraints implements TokenConstraintFactory {
  readonly #byName = new Map<string, TokenConstraint>()

  grammarFor(constraint: TokenConstraint): ResponseFormat {
    const name = `test-${this.#byName.size}`
    this.#byName.set(name, constraint)
    return { type: 'json_schema', name, schema: {}, strict: true }
  }

  async create(spec: ResponseFormat): Promise<TokenConstraint> {
    const constraint = spec.type === 'json_schema' ? this.#byName.get(spec.name) : undefined
    if (constraint === undefined) throw new Error(`no test matcher for ${JSON.stringify(spec)}`)
    return constraint
  }

  async check(): Promise<void> {}
}

export interface EngineSetup {
  readonly engine: BatchingEngine
  readonly runner: FakeStepRunner
  readonly constraints: TestConstraints
}

export async function startEngine(
  runnerOptions: FakeStepRunnerOptions = {},
  limits: Partial<BatchingEngineLimits> = {},
  readAdapter: ReadAdapter = readFakeLora,
  adapterOptions: Pick<BatchingEngineOptions, 'adapterLoadTimeoutMs' | 'hostCacheBytes' | 'speculation' | 'now'> = {},
): Promise<EngineSetup> {
  const runner = new FakeStepRunner(runnerOptions)
  const constraints = new TestConstraints()
  const engine = new BatchingEngine({
    ...adapterOptions,
    constraints: () => constraints,
    runner,
    limits: { maxBatchSize: 32, maxBatchPrefillTokens: 4096, maxConcurrentRequests: 128, ...limits },
    readAdapter,
    logger: silentLogger,
    name: 'fake',
  })
  await engine.start()
  return { engine, runner, constraints }
}

export async function collect(events: AsyncIterable<GenerationEvent>): Promise<GenerationEvent[]> {
  const out: GenerationEvent[] = []
  for await (const event of events) out.push(event)
  return out
}

export function tokensOf(events: readonly GenerationEvent[]): GeneratedToken[] {
  return events.flatMap((e) => (e.type === 'tokens' ? [...e.tokens] : []))
}

export function idsOf(events: readonly GenerationEvent[]): number[] {
  return tokensOf(events).map((t) => t.id)
}

export function finishOf(events: readonly GenerationEvent[]): GenerationEvent & { type: 'finish' } {
  const last = events[events.length - 1]
  if (last?.type !== 'finish') throw new Error(`last event is ${last?.type}`)
  return last
}

/** Resolve after `ms` of wall time. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Allows only tokens accepted by `allowed`; terminates after `length` accepted tokens. */
export class FakeConstraint implements TokenConstraint {
  readonly accepted: number[] = []
  masks = 0
  constructor(
    private readonly vocabSize: number,
    private readonly allowed: (id: number) => boolean,
    private readonly length: number,
  ) {}

  fillNextTokenMask(mask: Uint32Array): boolean {
    this.masks++
    for (let id = 0; id < this.vocabSize; id++) if (this.allowed(id)) mask[id >> 5]! |= 1 << (id & 31)
    return true
  }

  accept(id: number): boolean {
    if (!this.allowed(id)) return false
    this.accepted.push(id)
    return true
  }

  rollback(count: number): void {
    this.accepted.length -= count
  }

  isTerminated(): boolean {
    return this.accepted.length >= this.length
  }

  dispose(): void {}
}
