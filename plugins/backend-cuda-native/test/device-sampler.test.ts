// Device::sample against the engine's JS TokenSampler, its reference: the same random logits,
// parameters, histories, grammar masks, seeds and draw counts go to both, and every row must give
// the same token id (bit-exact sampling: the device ports the JS arithmetic, fdlibm's exp/log and
// the JS selection order), with logprobs and top logprobs within f32 rounding. Runs the reference
// and cpu devices, and cuda where a GPU is usable. Uses the addon's test hook `sampleRows`.
import t from 'tap'
import type { TokenConstraint } from '../../../core/src/contracts/grammar.ts'
import type { SamplingParams } from '../../../core/src/contracts/sampling.ts'
import { SamplingState } from '../../../core/src/engine/sampler/sampling-state.ts'
import { TokenSampler } from '../../../core/src/engine/sampler/token-sampler.ts'
import { SeededRandom } from '@loom/testkit'
import { loadNative } from '../src/index.ts'

/** The addon's test hook (native/src/binding.cc SampleRows); not part of NativeAddon's API. */
interface SampleRowsInput {
  vocabSize: number
  maxTop: number
  logits: Float32Array
  floats: Float64Array
  ints: Int32Array
  seeds: BigUint64Array
  penaltyStart: Int32Array
  penalties: Int32Array
  allowed: Uint32Array
}
interface SampleRowsOutput {
  token: Int32Array
  logprob: Float32Array
  topIds: Int32Array
  topLogprobs: Float32Array
}
type SampleRows = (device: string, input: SampleRowsInput) => Promise<SampleRowsOutput>

/** One row as both samplers see it. */
interface Row {
  readonly sampling: SamplingParams
  readonly state: SamplingState
  readonly draws: number
  readonly mask: Uint32Array | null
  readonly terminated: boolean
  readonly eos: readonly number[]
  readonly topLogprobs: number
}

/** A fake grammar: a fixed allowed mask, or a terminated one (only eos may follow). */
function constraintOf(row: Row): TokenConstraint | null {
  if (row.mask === null && !row.terminated) return null
  return {
    fillNextTokenMask: (mask) => {
      mask.set(row.mask!)
      return true
    },
    accept: () => true,
    rollback: () => {},
    isTerminated: () => row.terminated,
    dispose: () => {},
  }
}

const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!

/** Random logits of one row: smooth, peaked, quantised (many ties), with -inf and NaN holes. */
function fillLogits(r: () => number, row: Float32Array): void {
  const kind = Math.floor(r() * 5)
  const scale = pick(r, [0.5, 2, 5, 12])
  for (let v = 0; v < row.length; v++) {
    const g = (r() + r() + r() - 1.5) * scale
    row[v] = kind === 2 ? Math.round(g) : kind === 3 ? Math.round(g * 4) / 4 : g
  }
  if (kind === 1) for (let i = 0; i < 8; i++) row[Math.floor(r() * row.length)] = 8 + r() * 20
  if (kind === 4) for (let v = 0; v < row.length; v++) if (r() < 0.3) row[v] = -Infinity
  if (r() < 0.05) row[Math.floor(r() * row.length)] = NaN
  if (r() < 0.02) row.fill(-Infinity)
}

function makeRow(r: () => number, V: number): Row {
  const kind = Math.floor(r() * 8) // 0-1 greedy, 2-7 sampled
  const sampled = kind >= 2
  const penalised = r() < 0.35
  const sampling: SamplingParams = {
    temperature: sampled ? pick(r, [0.3, 0.7, 1, 1, 1.5, 1e-25]) : 0,
    topK: sampled ? pick(r, [0, 0, 1, 5, 40, 1500, V - 1, V + 3]) : pick(r, [0, 1]),
    topP: sampled ? pick(r, [1, 1, 0.9, 0.5, 0.95, 0.999]) : 1,
    typicalP: sampled ? pick(r, [1, 1, 1, 0.9, 0.3]) : 1,
    repetitionPenalty: penalised ? pick(r, [1, 1.3, 0.8, 2]) : 1,
    frequencyPenalty: penalised ? pick(r, [0, 0.5, -0.3]) : 0,
    presencePenalty: penalised ? pick(r, [0, 0.4, -1]) : 0,
    seed: BigInt(Math.floor(r() * 2 ** 32)) * 2n ** 32n + BigInt(Math.floor(r() * 2 ** 32)),
  }
  const prompt = Array.from({ length: Math.floor(r() * 40) }, () => Math.floor(r() * V))
  if (r() < 0.1) prompt.push(V + 5, -1) // out-of-vocabulary ids are skipped
  const state = new SamplingState(sampling, prompt)
  for (let i = Math.floor(r() * 30); i > 0; i--) state.record(r() < 0.5 ? Math.floor(r() * 50) : Math.floor(r() * V))
  const draws = r() < 0.3 ? 0 : Math.floor(r() * 60)
  for (let i = 0; i < draws; i++) state.rng.nextFloat()
  const maskKind = Math.floor(r() * 6) // 0: allowed mask, 1: terminated with eos, else none
  let mask: Uint32Array | null = null
  const eos: number[] = []
  if (maskKind === 0) {
    mask = new Uint32Array(Math.ceil(V / 32))
    const density = pick(r, [0.001, 0.05, 0.5, 0.95])
    for (let v = 0; v < V; v++) if (r() < density) mask[v >> 5]! |= 1 << (v & 31)
  } else if (maskKind === 1) {
    for (let i = 1 + Math.floor(r() * 3); i > 0; i--) eos.push(Math.floor(r() * V))
    if (r() < 0.2) eos.push(V + 1)
  }
  return { sampling, state, draws, mask, terminated: maskKind === 1, eos, topLogprobs: pick(r, [0, 0, 1, 5, 20]) }
}

/** The rows packed for the hook, from the JS state (the device's penalty list is its history). */
function pack(rows: readonly Row[], logits: Float32Array, V: number, maxTop: number): SampleRowsInput {
  const R = rows.length
  const W = Math.ceil(V / 32)
  const floats = new Float64Array(R * 6)
  const ints = new Int32Array(R * 4)
  const seeds = new BigUint64Array(R * 2)
  const penaltyStart = new Int32Array(R + 1)
  const pairs: number[] = []
  const allowed = new Uint32Array(R * W)
  rows.forEach((row, i) => {
    const s = row.sampling
    floats.set([s.temperature, s.topP, s.typicalP, s.repetitionPenalty, s.frequencyPenalty, s.presencePenalty], i * 6)
    ints.set([s.topK, row.topLogprobs, row.mask !== null || row.terminated ? 1 : 0, row.terminated ? 1 : 0], i * 4)
    seeds[i * 2] = s.seed
    seeds[i * 2 + 1] = BigInt(row.draws)
    const ids = new Set([...row.state.seen, ...row.state.outputCounts.keys()])
    for (const id of ids) pairs.push(id, row.state.outputCounts.get(id) ?? 0)
    penaltyStart[i + 1] = pairs.length / 2
    if (row.mask) allowed.set(row.mask, i * W)
    for (const id of row.eos) if (id >= 0 && id < V) allowed[i * W + (id >> 5)]! |= 1 << (id & 31)
  })
  return { vocabSize: V, maxTop, logits, floats, ints, seeds, penaltyStart, penalties: Int32Array.from(pairs), allowed }
}

interface Expected {
  readonly id: number
  readonly logprob: number
  readonly top: readonly { id: number; logprob: number }[]
}

/** The JS sampler on every row (a fresh TokenSampler per group, as the engine has one per vocabulary). */
function sampleJs(rows: readonly Row[], logits: Float32Array, V: number): Expected[] {
  const sampler = new TokenSampler(V)
  return rows.map((row, i) => {
    const out = sampler.sample({
      logits,
      offset: i * V,
      state: row.state,
      constraint: constraintOf(row),
      eosTokenIds: row.eos,
      topLogprobs: row.topLogprobs,
    })
    if (out.kind !== 'token') return { id: -1, logprob: 0, top: [] }
    return { id: out.token.id, logprob: out.token.logprob, top: out.token.top ?? [] }
  })
}

/** Within f32 rounding; NaN and infinite logprobs (rows holding NaN, or all -inf) must agree exactly. */
const close = (a: number, b: number): boolean =>
  Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)) || Math.abs(a - b) <= 1e-4 + 1e-5 * Math.abs(b)

// Vocabularies of real models (SmolLM2 49152, Llama-2 32000, Llama-3 128256, Qwen2 151936) in
// batches up to 64, and small ones in large batches for many rows (ties and masks bite there).
const GROUPS: readonly { V: number; rows: number; batch: number }[] = [
  { V: 49152, rows: 96, batch: 64 },
  { V: 32000, rows: 96, batch: 33 },
  { V: 128256, rows: 24, batch: 24 },
  { V: 151936, rows: 24, batch: 8 },
  { V: 2048, rows: 1500, batch: 64 },
  { V: 300, rows: 2500, batch: 64 },
  { V: 37, rows: 1000, batch: 1 },
]

const native = loadNative()
const sampleRows = (native as unknown as { sampleRows: SampleRows }).sampleRows
const devices = ['reference', 'cpu', ...(native.cudaStatus() === null ? ['cuda'] : [])]

t.test('device samplers give the JS TokenSampler token on every row', async (t) => {
  const maxTop = 20
  const mismatches = new Map<string, string[]>(devices.map((d) => [d, []]))
  let total = 0
  let sampled = 0
  for (const [g, { V, rows, batch }] of GROUPS.entries()) {
    const random = new SeededRandom(1000 + g)
    const r = () => random.next()
    for (let start = 0; start < rows; start += batch) {
      const n = Math.min(batch, rows - start)
      const logits = new Float32Array(n * V)
      const batchRows: Row[] = []
      for (let i = 0; i < n; i++) {
        fillLogits(r, logits.subarray(i * V, (i + 1) * V))
        batchRows.push(makeRow(r, V))
      }
      // Pack before sampling: the JS sampler records its token into the state.
      const input = pack(batchRows, logits, V, maxTop)
      const expected = sampleJs(batchRows, logits, V)
      total += n
      sampled += batchRows.filter((row) => row.sampling.temperature !== 0 && row.sampling.topK !== 1).length
      for (const device of devices) {
        const out = await sampleRows(device, input)
        const bad = mismatches.get(device)!
        expected.forEach((e, i) => {
          const where = `V=${V} row ${start + i}`
          if (out.token[i] !== e.id) return bad.push(`${where}: token ${out.token[i]} vs JS ${e.id}`)
          if (e.id < 0) return
          // The reference computes the normaliser as the JS does: its logprob is the JS value's f32.
          const want = Math.fround(e.logprob)
          const exact = device === 'reference' && !(Object.is(out.logprob[i], want) || Number.isNaN(want))
          if (exact || !close(out.logprob[i]!, e.logprob))
            return bad.push(`${where}: logprob ${out.logprob[i]} vs JS ${e.logprob}`)
          for (let j = 0; j < maxTop; j++) {
            const want = e.top[j]
            const id = out.topIds[i * maxTop + j]!
            const lp = out.topLogprobs[i * maxTop + j]!
            if (want === undefined ? id !== -1 : id !== want.id || !close(lp, want.logprob))
              return bad.push(`${where}: top ${j} (${id}, ${lp}) vs JS ${JSON.stringify(want ?? null)}`)
          }
        })
      }
    }
  }
  t.ok(total >= 5000 && sampled >= 3000, `${total} rows, ${sampled} of them sampled`)
  for (const [device, bad] of mismatches)
    t.same(bad.slice(0, 10), [], `${device}: every token, logprob and top logprob matches (${bad.length} mismatches)`)
})

t.test('a row gives the same token alone as in a batch', async (t) => {
  const V = 4096
  const random = new SeededRandom(77)
  const r = () => random.next()
  const rows = Array.from({ length: 40 }, () => makeRow(r, V))
  const logits = new Float32Array(rows.length * V)
  for (let i = 0; i < rows.length; i++) fillLogits(r, logits.subarray(i * V, (i + 1) * V))
  const all = pack(rows, logits, V, 0)
  for (const device of devices) {
    const together = await sampleRows(device, all)
    for (const i of [0, 7, 39]) {
      const alone = pack([rows[i]!], logits.slice(i * V, (i + 1) * V), V, 0)
      const one = await sampleRows(device, alone)
      t.equal(one.token[0], together.token[i], `${device}: row ${i} alone`)
    }
  }
})
