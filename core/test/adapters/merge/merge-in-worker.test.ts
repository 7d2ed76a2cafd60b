import t from 'tap'
import { SeededRandom } from '@loom/testkit'
import { mergeLoraWeightsInWorker } from '../../../src/adapters/merge/merge-in-worker.ts'
import { mergeLoraWeights, type MergeLoraOptions } from '../../../src/adapters/merge/merge-lora.ts'
import type { MergedAdaptersRequest } from '../../../src/adapters/merge/merge-params.ts'
import type { LoraModule, LoraModuleWeights, LoraWeights } from '../../../src/contracts/step-runner.ts'
import { LoomError } from '../../../src/errors/index.ts'

/**
 * Merges run on a worker thread (adapter-merger.ts): the result is the in-thread merge's, bit for
 * bit; the event loop keeps running meanwhile; a worker that fails is an `internal_error`.
 */
type Request = Pick<MergedAdaptersRequest, 'weights' | 'strategy' | 'density' | 'majoritySignMethod' | 'seed'>

const random = new SeededRandom(29)

function factors(rows: number, cols: number, rank: number, scale: number): LoraModuleWeights {
  return { rank, scale, a: random.normalArray(rank * cols, 0.1), b: random.normalArray(rows * rank, 0.1) }
}

function options(shapes: Partial<Record<LoraModule, [number, number]>>, maxRank: number): MergeLoraOptions {
  return { maxRank, shape: (m) => shapes[m] ?? [4, 4] }
}

function request(strategy: Request['strategy'], weights: number[]): Request {
  return { weights, strategy, density: 0.5, majoritySignMethod: 'total', seed: 7 }
}

/** The longest gap between 2-ms timer ticks while `work` runs: how long the event loop stalled. */
async function longestStall<T>(work: () => Promise<T>): Promise<{ result: T; stallMs: number }> {
  let last = performance.now()
  let stallMs = 0
  const tick = setInterval(() => {
    const now = performance.now()
    stallMs = Math.max(stallMs, now - last)
    last = now
  }, 2)
  try {
    last = performance.now()
    const result = await work()
    return { result, stallMs: Math.max(stallMs, performance.now() - last) }
  } finally {
    clearInterval(tick)
  }
}

t.test('the worker computes exactly what the in-thread merge computes', async (t) => {
  const shapes: Partial<Record<LoraModule, [number, number]>> = {
    q_proj: [12, 12],
    k_proj: [4, 12],
    down_proj: [12, 20],
  }
  const inputs: LoraWeights[] = [
    { kind: 'lora', key: 'a', layers: [{ q_proj: factors(12, 12, 3, 2), k_proj: factors(4, 12, 2, 1) }, {}] },
    {
      kind: 'lora',
      key: 'b',
      layers: [{ q_proj: factors(12, 12, 4, 0.5) }, { down_proj: factors(12, 20, 5, 1.5) }],
    },
  ]
  const cases: [string, Request, number][] = [
    ['linear within the rank budget (concatenated factors)', request('linear', [0.6, 0.4]), 64],
    ['linear over the rank budget (truncated SVD)', request('linear', [0.6, -0.4]), 3],
    ['ties', request('ties', [1, 0.5]), 64],
    ['dare_ties', request('dare_ties', [0.7, 0.7]), 64],
  ]
  for (const [name, req, maxRank] of cases) {
    const expected = await mergeLoraWeights(inputs, req, 'k', options(shapes, maxRank))
    const got = await mergeLoraWeightsInWorker(inputs, req, 'k', options(shapes, maxRank))
    t.same(got.report, expected.report, `${name}: report`)
    t.equal(got.weights.key, 'k', `${name}: key`)
    t.equal(got.weights.layers.length, expected.weights.layers.length, `${name}: layers`)
    expected.weights.layers.forEach((layer, l) => {
      t.same(Object.keys(got.weights.layers[l]!).sort(), Object.keys(layer).sort(), `${name}: layer ${l} modules`)
      for (const [module, w] of Object.entries(layer) as [LoraModule, LoraModuleWeights][]) {
        const g = got.weights.layers[l]![module]!
        t.ok(g.a instanceof Float32Array && g.b instanceof Float32Array, `${name}: ${module} arrives as Float32Arrays`)
        t.same([g.rank, g.scale], [w.rank, w.scale], `${name}: layer ${l} ${module} rank and scale`)
        t.same(Array.from(g.a), Array.from(w.a), `${name}: layer ${l} ${module} A bit for bit`)
        t.same(Array.from(g.b), Array.from(w.b), `${name}: layer ${l} ${module} B bit for bit`)
      }
    })
  }
})

t.test('the event loop keeps running while a large merge computes', async (t) => {
  // Two SmolLM2-135M-sized MLP projections: on the event loop each module's dense TIES merge and
  // SVD is one uninterrupted stretch of arithmetic.
  const shapes: Partial<Record<LoraModule, [number, number]>> = { gate_proj: [1536, 576], up_proj: [1536, 576] }
  const adapter = (key: string): LoraWeights => ({
    kind: 'lora',
    key,
    layers: [{ gate_proj: factors(1536, 576, 16, 2), up_proj: factors(1536, 576, 16, 2) }],
  })
  const inputs = [adapter('a'), adapter('b')]
  const req = request('ties', [0.5, 0.5])
  const inThread = await longestStall(() => mergeLoraWeights(inputs, req, 'k', options(shapes, 32)))
  const inWorker = await longestStall(() => mergeLoraWeightsInWorker(inputs, req, 'k', options(shapes, 32)))
  t.same(inWorker.result.report, inThread.result.report, 'the same merge either way')
  t.ok(inThread.stallMs > 200, `on the event loop the merge stalls it (longest gap ${inThread.stallMs.toFixed(0)} ms)`)
  t.ok(
    inWorker.stallMs < inThread.stallMs / 2,
    `on the worker the loop keeps ticking (longest gap ${inWorker.stallMs.toFixed(0)} ms)`,
  )
})

t.test('a merge that throws inside the worker rejects with internal_error', async (t) => {
  const inputs: LoraWeights[] = [{ kind: 'lora', key: 'a', layers: [{ q_proj: factors(4, 4, 2, 1) }] }]
  const broken: MergeLoraOptions = {
    maxRank: 8,
    // No shape for any module: the worker's merge fails on its first module.
    shape: () => undefined as unknown as [number, number],
  }
  const err = await mergeLoraWeightsInWorker(inputs, request('ties', [1]), 'k', broken).catch((e: unknown) => e)
  t.ok(err instanceof LoomError, 'a LoomError')
  t.equal((err as LoomError).code, 'internal_error')
  t.match((err as LoomError).message, /merging adapters failed: /)
})

t.test("an aborted merge stops at once with the signal's reason", async (t) => {
  const shapes: Partial<Record<LoraModule, [number, number]>> = { gate_proj: [1536, 576], up_proj: [1536, 576] }
  const adapter = (key: string): LoraWeights => ({
    kind: 'lora',
    key,
    layers: [{ gate_proj: factors(1536, 576, 16, 2), up_proj: factors(1536, 576, 16, 2) }],
  })
  const controller = new AbortController()
  const merge = mergeLoraWeightsInWorker(
    [adapter('a'), adapter('b')],
    request('ties', [0.5, 0.5]),
    'k',
    options(shapes, 32),
    controller.signal,
  )
  setTimeout(() => controller.abort(new LoomError('server_closing')), 100)
  // Left alone, this merge resolves (over a second of arithmetic): rejecting shows it was stopped.
  await t.rejects(merge, { code: 'server_closing' })
})
