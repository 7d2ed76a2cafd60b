import t, { type Test } from 'tap'
import { SeededRandom } from '@loom/testkit'
import { seededUniform } from '../../../src/adapters/merge/seeded-random.ts'
import { refDisjoint, refDrop, refLinear, refTrim } from './reference-merge.ts'
import {
  electSigns,
  magnitudePrune,
  mergeTaskTensors,
  randomPrune,
} from '../../../src/adapters/merge/task-arithmetic.ts'

/*
 * Each strategy against a direct, deliberately naive transcription of its formula
 * (PEFT `merge_utils`, TIES-Merging Yadav et al. 2023, DARE Yu et al. 2023).
 */

function close(t: Test, got: Float32Array, want: number[], message: string, tol = 1e-6) {
  t.equal(got.length, want.length, `${message}: length`)
  const worst = want.reduce((m, v, j) => Math.max(m, Math.abs(v - got[j]!)), 0)
  t.ok(worst <= tol, `${message} (max abs diff ${worst})`)
}

const random = new SeededRandom(7)
const tensors = [0, 1, 2].map(() => Array.from(random.normalArray(40, 1)))
// Force sign conflicts and exact cancellations in a few entries.
tensors[0]![0] = 1
tensors[1]![0] = -1
tensors[2]![0] = 0
tensors[0]![1] = 2
tensors[1]![1] = -0.5
tensors[2]![1] = -0.5
const f32 = tensors.map((x) => Float32Array.from(x))
const exact = f32.map((x) => Array.from(x)) // the f32-rounded inputs the reference sees
const weights = [0.6, 0.3, -0.2]

t.test('linear: Σ w_i τ_i', async (t) => {
  const got = mergeTaskTensors(f32, weights, {
    strategy: 'linear',
    density: 0,
    majoritySignMethod: 'total',
    uniformFor: () => () => 0,
  })
  close(t, got, refLinear(exact, weights), 'linear')
})

t.test('magnitude trim keeps the ⌊d·n⌋ largest entries', async (t) => {
  for (const d of [0, 0.05, 0.3, 0.5, 0.999, 1]) {
    close(t, magnitudePrune(f32[0]!, d), refTrim(exact[0]!, d), `density ${d}`, 0)
  }
  // Ties at the threshold keep the lowest indices.
  close(t, magnitudePrune(Float32Array.from([1, -1, 1, 0.5, -1]), 0.4), [1, -1, 0, 0, 0], 'ties at threshold', 0)
})

t.test('sign election: total vs frequency', async (t) => {
  // Entry 1: values 2, -0.5, -0.5 → total +, frequency −.
  t.equal(electSigns(f32, 'total')[1], 1)
  t.equal(electSigns(f32, 'frequency')[1], -1)
  // Entry 0: 1, -1, 0 → both sums are 0, elected +.
  t.equal(electSigns(f32, 'total')[0], 1)
  t.equal(electSigns(f32, 'frequency')[0], 1)
})

t.test('ties: trim, elect, disjoint mean', async (t) => {
  for (const method of ['total', 'frequency'] as const) {
    for (const d of [0.2, 0.5, 1]) {
      const got = mergeTaskTensors(f32, weights, {
        strategy: 'ties',
        density: d,
        majoritySignMethod: method,
        uniformFor: () => () => 0,
      })
      const trimmed = exact.map((x) => refTrim(x, d))
      close(t, got, refDisjoint(trimmed, weights, method), `ties ${method} density ${d}`)
    }
  }
})

t.test('dare_linear and dare_ties: seeded drop, rescale by 1/d, then combine', async (t) => {
  for (const d of [0.3, 0.7]) {
    const stream = (i: number) => seededUniform(42, 'test', i)
    const dropped = exact.map((x, i) => refDrop(x, d, stream(i)))
    const lin = mergeTaskTensors(f32, weights, {
      strategy: 'dare_linear',
      density: d,
      majoritySignMethod: 'total',
      uniformFor: stream,
    })
    close(t, lin, refLinear(dropped, weights), `dare_linear density ${d}`, 1e-5)
    for (const method of ['total', 'frequency'] as const) {
      const ties = mergeTaskTensors(f32, weights, {
        strategy: 'dare_ties',
        density: d,
        majoritySignMethod: method,
        uniformFor: stream,
      })
      close(t, ties, refDisjoint(dropped, weights, method), `dare_ties ${method} density ${d}`, 1e-5)
    }
  }
})

t.test('random drop: keeps about d of the entries, preserves the mean, reproducible by seed', async (t) => {
  const ones = new Float32Array(20000).fill(1)
  const kept = randomPrune(ones, 0.25, seededUniform(1, 'x'))
  const survivors = kept.filter((v) => v !== 0)
  t.ok(Math.abs(survivors.length / ones.length - 0.25) < 0.02, `kept fraction ${survivors.length / ones.length}`)
  t.ok(
    survivors.every((v) => v === 4),
    'survivors rescaled by 1/d',
  )
  const mean = kept.reduce((s, v) => s + v, 0) / kept.length
  t.ok(Math.abs(mean - 1) < 0.05, `mean preserved (${mean})`)
  t.same(randomPrune(ones, 0.25, seededUniform(1, 'x')), kept, 'same seed, same mask')
  t.not(randomPrune(ones, 0.25, seededUniform(2, 'x')).join(), kept.join(), 'another seed, another mask')
  t.same(randomPrune(ones, 1, seededUniform(1, 'x')), ones, 'density 1 keeps everything unchanged')
})
