import t from 'tap'
import { isLoomError } from '../../../src/errors/index.ts'
import { mergeIdentity, mergeKey } from '../../../src/adapters/merge/merge-key.ts'
import { parseMergedAdapters } from '../../../src/adapters/merge/parse-merged-adapters.ts'
import { parseGenerateBody } from '../../../src/routes/native/parse-generate-body.ts'

const limits = { maxInputLength: 100, maxTotalTokens: 128, maxStopSequences: 2, maxTopLogprobs: 5 }
const native = (parameters: Record<string, unknown>) =>
  parseGenerateBody(
    { inputs: 'x', parameters },
    { stream: false, bearerToken: undefined, defaultSource: 'hub', limits },
  )

function errorOf(fn: () => unknown): { message: string; param: string | null | undefined } {
  try {
    fn()
  } catch (err) {
    if (isLoomError(err)) return { message: err.message, param: err.param }
    throw err
  }
  throw new Error('expected an error')
}

t.test('defaults follow LoRAX: linear, total, density 0; inputs take the request source', async (t) => {
  const r = native({ adapter_source: 'local', merged_adapters: { ids: ['a', 'b'], weights: [0.5, 0.5] } })
  t.same(r.generation.mergedAdapters, {
    inputs: [
      { source: 'local', id: 'a' },
      { source: 'local', id: 'b' },
    ],
    weights: [0.5, 0.5],
    strategy: 'linear',
    density: 0,
    majoritySignMethod: 'total',
    seed: 0,
  })
  t.equal(r.generation.adapter, null)
  const d = native({
    merged_adapters: {
      ids: ['a'],
      weights: [1],
      merge_strategy: 'dare_ties',
      density: 0.3,
      majority_sign_method: 'frequency',
      seed: 7,
    },
  })
  t.equal(d.generation.mergedAdapters!.inputs[0]!.source, 'hub', 'the default source')
  t.equal(d.generation.mergedAdapters!.strategy, 'dare_ties')
  t.equal(d.generation.mergedAdapters!.majoritySignMethod, 'frequency')
  t.equal(d.generation.mergedAdapters!.seed, 7)
  t.equal(native({}).generation.mergedAdapters, null)
})

t.test('validation errors name the field', async (t) => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ adapter_id: 'x', merged_adapters: { ids: ['a'], weights: [1] } }, 'parameters.merged_adapters', /exactly one/],
    [{ merged_adapters: { ids: [], weights: [] } }, 'parameters.merged_adapters.ids', /at least one adapter ID/],
    [{ merged_adapters: { weights: [1] } }, 'parameters.merged_adapters.ids', /at least one adapter ID/],
    [{ merged_adapters: { ids: 'a', weights: [1] } }, 'parameters.merged_adapters.ids', /array of adapter ID strings/],
    [
      { merged_adapters: { ids: ['a', ''], weights: [1, 1] } },
      'parameters.merged_adapters.ids[1]',
      /base model cannot be merged/,
    ],
    [
      { merged_adapters: { ids: ['a', 'b'], weights: [1] } },
      'parameters.merged_adapters.weights',
      /must match the number of adapter weights/,
    ],
    [{ merged_adapters: { ids: ['a'] } }, 'parameters.merged_adapters.weights', /must match/],
    [{ merged_adapters: { ids: ['a'], weights: ['1'] } }, 'parameters.merged_adapters.weights', /finite numbers/],
    [
      { merged_adapters: { ids: ['a'], weights: [1], merge_strategy: 'slerp' } },
      'parameters.merged_adapters.merge_strategy',
      /"linear", "ties", "dare_linear", "dare_ties"/,
    ],
    [
      { merged_adapters: { ids: ['a'], weights: [1], majority_sign_method: 'max' } },
      'parameters.merged_adapters.majority_sign_method',
      /"total", "frequency"/,
    ],
    [{ merged_adapters: { ids: ['a'], weights: [1], density: 1.5 } }, 'parameters.merged_adapters.density', /<= 1/],
    [{ merged_adapters: { ids: ['a'], weights: [1], density: -0.1 } }, 'parameters.merged_adapters.density', />= 0/],
    [
      { merged_adapters: { ids: ['a'], weights: [1], merge_strategy: 'ties' } },
      'parameters.merged_adapters.density',
      /> 0 and <= 1 with merge_strategy "ties"/,
    ],
    [{ merged_adapters: { ids: ['a'], weights: [1], seed: -1 } }, 'parameters.merged_adapters.seed', /integer/],
    [
      { merged_adapters: { ids: ['a'], weights: [1], adapter_ids: [] } },
      'parameters.merged_adapters.adapter_ids',
      /not a known field/,
    ],
    [{ merged_adapters: ['a'] }, 'parameters.merged_adapters', /JSON object/],
  ]
  for (const [parameters, param, pattern] of cases) {
    const err = errorOf(() => native(parameters))
    t.equal(err.param, param, `${JSON.stringify(parameters)} → ${param}`)
    t.match(err.message, pattern)
  }
  t.equal(
    errorOf(() => parseMergedAdapters({ ids: [] }, 'merged_adapters', 'hub')).param,
    'merged_adapters.ids',
    'v1 path',
  )
})

t.test('the cache key covers inputs, revisions and the parameters the strategy reads', async (t) => {
  const base = parseMergedAdapters({ ids: ['a', 'b'], weights: [0.5, 0.5] }, 'm', 'local')
  const resolved = (rev: string) => [
    { source: 'local', id: 'a', revision: 'r1', files: [] },
    { source: 'local', id: 'b', revision: rev, files: [] },
  ]
  const key = (req: typeof base, rev = 'r2', maxRank = 64) => mergeKey(mergeIdentity(resolved(rev), req, maxRank))
  t.match(key(base), /^merge-[0-9a-f]{40}$/)
  t.equal(key(base), key({ ...base }), 'stable')
  t.equal(
    key(base),
    key({ ...base, density: 0.7, seed: 3, majoritySignMethod: 'frequency' }),
    'linear ignores density, sign method, seed',
  )
  t.not(key(base), key(base, 'r3'), 'a new revision of an input')
  t.not(key(base), key({ ...base, weights: [0.4, 0.6] }), 'weights')
  t.not(key(base), key(base, 'r2', 32), 'the rank budget')
  const ties = { ...base, strategy: 'ties' as const, density: 0.5 }
  t.not(key(ties), key(base), 'strategy')
  t.not(key(ties), key({ ...ties, density: 0.6 }), 'ties reads density')
  t.not(key(ties), key({ ...ties, majoritySignMethod: 'frequency' }), 'ties reads the sign method')
  t.equal(key(ties), key({ ...ties, seed: 5 }), 'ties ignores the seed')
  const dare = { ...base, strategy: 'dare_linear' as const, density: 0.5 }
  t.not(key(dare), key({ ...dare, seed: 5 }), 'DARE reads the seed')
})
