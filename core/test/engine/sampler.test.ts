import t, { type Test } from 'tap'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { blockedSum, MASS_SCALE, massUnits, SUM_CHUNK } from '../../src/engine/sampler/blocked-sum.ts'
import { createWarpScratch } from '../../src/engine/sampler/candidates.ts'
import { massPrefix } from '../../src/engine/sampler/mass-prefix.ts'
import { applyPenalties } from '../../src/engine/sampler/penalties.ts'
import { SplitMix64, Xoshiro128StarStar } from '../../src/engine/sampler/rng.ts'
import { SamplingState } from '../../src/engine/sampler/sampling-state.ts'
import { selectSmallest, sortRange } from '../../src/engine/sampler/select.ts'
import { TokenSampler } from '../../src/engine/sampler/token-sampler.ts'
import { warp } from '../../src/engine/sampler/warp-chain.ts'
import { GREEDY } from './engine-fixtures.ts'

// ——— direct (Hugging Face style, full sort) reference implementations ———

function softmax(logits: number[]): number[] {
  const max = Math.max(...logits)
  const e = logits.map((x) => (x === -Infinity ? 0 : Math.exp(x - max)))
  const s = e.reduce((a, b) => a + b, 0)
  return e.map((x) => x / s)
}

function directTopK(logits: number[], k: number): number[] {
  if (k <= 0 || k >= logits.length) return logits
  const kth = [...logits].sort((a, b) => b - a)[k - 1]!
  return logits.map((x) => (x < kth ? -Infinity : x))
}

function directTopP(logits: number[], p: number): number[] {
  if (p >= 1) return logits
  const probs = softmax(logits)
  const order = [...logits.keys()].sort((a, b) => probs[a]! - probs[b]!) // ascending
  let cum = 0
  const out = [...logits]
  order.forEach((id, rank) => {
    cum += probs[id]!
    if (cum <= 1 - p && rank < order.length - 1) out[id] = -Infinity
  })
  return out
}

function directTypical(logits: number[], mass: number): number[] {
  if (mass >= 1) return logits
  const probs = softmax(logits)
  const logp = probs.map((p) => Math.log(p))
  const entropy = -probs.reduce((s, p, i) => (p > 0 ? s + p * logp[i]! : s), 0)
  const shifted = logp.map((l) => Math.abs(-l - entropy))
  const order = [...logits.keys()].sort((a, b) => shifted[a]! - shifted[b]!)
  const cums: number[] = []
  let c = 0
  for (const id of order) cums.push((c += probs[id]!))
  let lastInd = cums.filter((x) => x < mass).length
  lastInd = Math.min(lastInd, order.length - 1)
  const cutoff = shifted[order[lastInd]!]!
  return logits.map((x, i) => (shifted[i]! > cutoff ? -Infinity : x))
}

function directWarp(logits: number[], s: SamplingParams): number[] {
  let l = directTopK(logits, s.topK)
  l = l.map((x) => x / s.temperature)
  l = directTopP(l, s.topP)
  l = directTypical(l, s.typicalP)
  return softmax(l)
}

function engineWarp(logits: number[], s: SamplingParams): number[] {
  const work = Float32Array.from(logits)
  const scratch = createWarpScratch(logits.length)
  const n = warp(work, scratch, s)
  const out = new Array<number>(logits.length).fill(0)
  for (let i = 0; i < n; i++) out[scratch.ids[i]!] = scratch.prob[scratch.ids[i]!]!
  return out
}

function randomLogits(rng: Xoshiro128StarStar, n: number, spread = 6): number[] {
  // Rounded to float32 so both sides see the same values.
  return Array.from(Float32Array.from({ length: n }, () => (rng.nextFloat() - 0.5) * spread))
}

function close(t: Test, actual: number[], expected: number[], what: string): void {
  const worst = Math.max(...actual.map((a, i) => Math.abs(a - expected[i]!)))
  t.ok(worst < 1e-5, `${what}: worst |Δp| ${worst.toExponential(2)}`)
}

const rng = new Xoshiro128StarStar(123n)

t.test('top_k, temperature, top_p, typical_p each match a direct computation', async (t) => {
  for (let trial = 0; trial < 40; trial++) {
    const V = 5 + (trial % 37)
    const logits = randomLogits(rng, V)
    const params: SamplingParams[] = [
      { ...GREEDY, temperature: 1, topK: 1 + (trial % V) },
      { ...GREEDY, temperature: 0.3 + trial / 20 },
      { ...GREEDY, temperature: 1, topP: 0.05 + (trial % 19) / 20 },
      { ...GREEDY, temperature: 1, typicalP: 0.05 + (trial % 19) / 20 },
      { ...GREEDY, temperature: 0.7, topK: 1 + (trial % 5) * 3, topP: 0.8, typicalP: 0.9 },
    ]
    for (const p of params)
      close(t, engineWarp(logits, p), directWarp(logits, p), `V=${V} ${JSON.stringify({ ...p, seed: undefined })}`)
  }
})

t.test('top_k keeps ties with the k-th logit, like Hugging Face', async (t) => {
  const logits = [1, 3, 2, 3, 0, 2]
  const p = { ...GREEDY, temperature: 1, topK: 3 }
  const kept = engineWarp(logits, p).map((x) => x > 0)
  t.same(kept, [false, true, true, true, false, true])
})

t.test('warpers on a large vocabulary match the direct computation (partial selection path)', async (t) => {
  const V = 5000
  const logits = randomLogits(rng, V, 20)
  for (const p of [
    { ...GREEDY, temperature: 1, topP: 0.9 },
    { ...GREEDY, temperature: 1, typicalP: 0.5 },
    { ...GREEDY, temperature: 1.3, topK: 300 },
  ]) {
    close(t, engineWarp(logits, p), directWarp(logits, p), JSON.stringify({ ...p, seed: undefined }))
  }
})

t.test('penalties match the CTRL and OpenAI formulas', async (t) => {
  const logits = [2, -2, 1, -1, 0.5, 3]
  const sampling: SamplingParams = { ...GREEDY, repetitionPenalty: 1.5, frequencyPenalty: 0.5, presencePenalty: 0.25 }
  const state = new SamplingState(sampling, [0, 1])
  for (const id of [2, 2, 3]) state.record(id)
  const work = Float32Array.from(logits)
  applyPenalties(work, state, sampling)
  const counts = new Map([
    [2, 2],
    [3, 1],
  ])
  const expected = logits.map((x, id) => {
    let y = x
    if ([0, 1, 2, 3].includes(id)) y = y < 0 ? y * 1.5 : y / 1.5
    const c = counts.get(id) ?? 0
    return y - c * 0.5 - (c > 0 ? 0.25 : 0)
  })
  close(t, [...work], expected, 'penalised logits')
})

t.test('frequency/presence count output tokens only; repetition covers the prompt too', async (t) => {
  const sampling: SamplingParams = { ...GREEDY, frequencyPenalty: 1 }
  const state = new SamplingState(sampling, [0, 0, 0])
  const work = Float32Array.from([1, 1])
  applyPenalties(work, state, sampling)
  t.same([...work], [1, 1], 'prompt tokens do not count for frequency')
})

t.test('greedy is a single argmax, first on ties; logprob is the raw log-softmax', async (t) => {
  const sampler = new TokenSampler(4)
  const logits = Float32Array.from([0, 2, 2, 1])
  const out = sampler.sample({
    logits,
    offset: 0,
    state: new SamplingState(GREEDY, []),
    constraint: null,
    eosTokenIds: [],
    topLogprobs: 0,
  })
  if (out.kind !== 'token') throw new Error(out.kind)
  t.equal(out.token.id, 1)
  const lse = Math.log([0, 2, 2, 1].reduce((s, x) => s + Math.exp(x), 0))
  t.ok(Math.abs(out.token.logprob - (2 - lse)) < 1e-6)
})

t.test('logprob ignores temperature and penalties', async (t) => {
  const sampler = new TokenSampler(3)
  const logits = Float32Array.from([1, 0, -1])
  const sampling = { ...GREEDY, temperature: 0.1, repetitionPenalty: 3, seed: 5n }
  const out = sampler.sample({
    logits,
    offset: 0,
    state: new SamplingState(sampling, [0]),
    constraint: null,
    eosTokenIds: [],
    topLogprobs: 2,
  })
  if (out.kind !== 'token') throw new Error(out.kind)
  const lse = Math.log(Math.exp(1) + 1 + Math.exp(-1))
  t.ok(Math.abs(out.token.logprob - (logits[out.token.id]! - lse)) < 1e-6)
  t.same(
    out.token.top!.map((x) => x.id),
    [0, 1],
  )
})

t.test('draws follow the warped distribution', async (t) => {
  const V = 8
  const logits = Float32Array.from([0.5, 1.5, -1, 0, 2, -3, 1, 0.2])
  const sampling: SamplingParams = { ...GREEDY, temperature: 0.9, topP: 0.9, seed: 9n }
  const expected = directWarp([...logits], sampling)
  const sampler = new TokenSampler(V)
  const state = new SamplingState(sampling, [])
  const counts = new Array<number>(V).fill(0)
  const N = 40000
  for (let i = 0; i < N; i++) {
    const out = sampler.sample({ logits, offset: 0, state, constraint: null, eosTokenIds: [], topLogprobs: 0 })
    if (out.kind === 'token') counts[out.token.id]!++
  }
  const worst = Math.max(...counts.map((c, i) => Math.abs(c / N - expected[i]!)))
  t.ok(worst < 0.01, `worst frequency error ${worst.toFixed(4)}`)
  t.same(
    counts.map((c) => c > 0),
    expected.map((p) => p > 0),
    'no draw outside the kept set',
  )
})

t.test('quickselect + sortRange agree with a full sort', async (t) => {
  for (let trial = 0; trial < 50; trial++) {
    const n = 1 + (rng.nextUint32() % 300)
    const key = Float64Array.from({ length: n }, () => Math.floor(rng.nextFloat() * 20)) // many ties
    const ids = Int32Array.from({ length: n }, (_, i) => i)
    const k = 1 + (rng.nextUint32() % n)
    selectSmallest(ids, 0, n, k, key)
    sortRange(ids, 0, k, key)
    const expected = [...key].sort((a, b) => a - b).slice(0, k)
    t.same(
      [...ids.subarray(0, k)].map((id) => key[id]),
      expected,
    )
  }
})

t.test('quickselect brings the (key, id)-first ids forward: ties go to the smaller id', async (t) => {
  for (let trial = 0; trial < 50; trial++) {
    const n = 1 + (rng.nextUint32() % 300)
    const key = Float64Array.from({ length: n }, () => Math.floor(rng.nextFloat() * 5)) // many ties
    const ids = Int32Array.from({ length: n }, (_, i) => n - 1 - i)
    const k = 1 + (rng.nextUint32() % n)
    selectSmallest(ids, 0, n, k, key)
    const expected = [...key.keys()].sort((a, b) => key[a]! - key[b]! || a - b).slice(0, k)
    t.same(
      [...ids.subarray(0, k)].sort((a, b) => a - b),
      expected.sort((a, b) => a - b),
    )
  }
})

t.test('massPrefix: the (key, id)-ordered prefix whose exact mass reaches the target, in id order', async (t) => {
  for (let trial = 0; trial < 200; trial++) {
    const n = 1 + (rng.nextUint32() % 2000)
    // Probabilities with many exact ties (a few levels), normalised; keys -p as top-p's.
    const weights = Array.from({ length: n }, () => 2 ** -Math.floor(rng.nextFloat() * 6))
    const total = weights.reduce((a, b) => a + b, 0)
    const prob = Float64Array.from(weights, (w) => w / total)
    const key = Float64Array.from(prob, (p) => -p)
    const mass = [0.05, 0.3, 0.5, 0.9, 0.999][trial % 5]!
    const ids = Int32Array.from({ length: n }, (_, i) => i)
    const kept = massPrefix(ids, n, key, prob, mass)
    // Brute force: a full (key, id) sort, then keep while the mass before a token is short.
    const order = [...key.keys()].sort((a, b) => key[a]! - key[b]! || a - b)
    let before = 0
    let expected = 0
    for (const id of order) {
      if (expected > 0 && before >= mass * MASS_SCALE) break
      before += massUnits(prob[id]!)
      expected++
    }
    t.equal(kept, expected, `n ${n} mass ${mass}`)
    const want = order.slice(0, expected).sort((a, b) => a - b)
    if (!t.same([...ids.subarray(0, kept)], want, `kept ids, n ${n} mass ${mass}`)) break
  }
})

t.test('blockedSum adds chunks of SUM_CHUNK in order, then the chunk sums in order', async (t) => {
  // Terms whose sum depends on the order: tiny ones, which add up within a chunk but round away
  // one at a time once the running sum is near 1, then a 1 closing each chunk.
  const n = 3 * SUM_CHUNK + 17
  const terms = Array.from({ length: n }, (_, i) => (i % SUM_CHUNK === SUM_CHUNK - 1 ? 1 : 2 ** -53))
  let expected = 0
  for (let c = 0; c < n; c += SUM_CHUNK) {
    let chunk = 0
    for (let i = c; i < Math.min(n, c + SUM_CHUNK); i++) chunk += terms[i]!
    expected += chunk
  }
  const sequential = terms.reduce((a, b) => a + b, 0)
  t.equal(
    blockedSum(n, (i) => terms[i]!),
    expected,
  )
  t.not(expected, sequential, 'the order shows in the bits')
})

t.test('rng: SplitMix64 reference values; xoshiro128** is uniform and seed-determined', async (t) => {
  const mix = new SplitMix64(0n)
  t.equal(mix.next(), 0xe220a8397b1dcdafn)
  t.equal(mix.next(), 0x6e789e6aa1b965f4n)
  t.equal(mix.next(), 0x06c45d188009454fn)
  const a = new Xoshiro128StarStar(7n)
  const b = new Xoshiro128StarStar(7n)
  const c = new Xoshiro128StarStar(8n)
  const xs = Array.from({ length: 10 }, () => a.nextUint32())
  t.same(
    Array.from({ length: 10 }, () => b.nextUint32()),
    xs,
  )
  t.notSame(
    Array.from({ length: 10 }, () => c.nextUint32()),
    xs,
  )
  const r = new Xoshiro128StarStar(99n)
  const buckets = new Array<number>(10).fill(0)
  let outOfRange = 0
  for (let i = 0; i < 100000; i++) {
    const u = r.nextFloat()
    if (!(u >= 0 && u < 1)) outOfRange++
    else buckets[Math.floor(u * 10)]!++
  }
  t.equal(outOfRange, 0)
  t.ok(Math.max(...buckets.map((x) => Math.abs(x - 10000))) < 500, `buckets ${buckets}`)
})

t.test('a vanishing temperature approaches greedy instead of overflowing f32', async (t) => {
  const V = 6
  const logits = Float32Array.from([0.5, 3.25, -1, 3.0, 2, -3])
  const sampler = new TokenSampler(V)
  for (const temperature of [1e-40, 1e-30, 1e-12]) {
    for (const topK of [0, 5]) {
      const sampling: SamplingParams = { ...GREEDY, temperature, topK, seed: 3n }
      const state = new SamplingState(sampling, [])
      const ids = new Set<number>()
      for (let i = 0; i < 50; i++) {
        const out = sampler.sample({ logits, offset: 0, state, constraint: null, eosTokenIds: [], topLogprobs: 0 })
        if (out.kind !== 'token') throw new Error(out.kind)
        ids.add(out.token.id)
      }
      t.same([...ids], [1], `temperature ${temperature}, top_k ${topK}: always the argmax`)
    }
  }
})
