/**
 * The Medusa part of `npm run bench` (issue 7, acceptance 2): tokens/s of greedy generation at
 * batch 1 and 4 with and without Medusa heads, mean tokens accepted per verification step, and
 * the cost of one verification step against one plain decode step.
 *
 * Verification (tree candidates, acceptance, KV compaction) lives in the core's BatchingEngine,
 * so this drives the engine over a `NativeStepRunner`, as the server does, rather than raw runner
 * steps. The engine and adapter reader are core internals (not on `@loom/core`'s public surface):
 * this dev tool imports them by path, like tools/demo-model does; plugin code never does.
 *
 * Requests run with no EOS (exactly `maxNewTokens` tokens each), so both modes generate the same
 * number of tokens and tokens/s compare directly; the timing includes each batch's prefill.
 */
import {
  GREEDY_SAMPLING,
  type BackendRequest,
  type Logger,
  type MedusaWeights,
  type ModelSpec,
  type StepBatch,
  type StepOutput,
  type StepRunner,
} from '@loom/core'
import { readMedusaAdapter } from '../../../core/src/adapters/read-medusa.ts'
import { BatchingEngine } from '../../../core/src/engine/batching-engine.ts'
import { NativeStepRunner } from '../src/index.ts'
import { median } from './bench-report.ts'

export interface MedusaBenchOptions {
  readonly modelDir: string
  readonly headsDir: string
  /** Prompts as token ids (already tokenized, BOS included where the model wants it). */
  readonly prompts: readonly (readonly number[])[]
  readonly batches: readonly number[]
  readonly maxNewTokens: number
  readonly threads: number
  /** Candidate tree (`medusa_choices`); absent: the engine's default. */
  readonly choices?: readonly (readonly number[])[]
  /** false: every verification uses the whole tree (no adaptive tree size). */
  readonly adaptive?: boolean
  /**
   * Rounds per batch size (default 3). Each round times plain then Medusa back to back; the
   * speed-up is the median of the rounds' ratios, since this shared host's speed drifts by tens
   * of percent between seconds while a pair of runs sees nearly the same machine.
   */
  readonly rounds?: number
}

export interface MedusaRow {
  readonly batch: number
  readonly medusa: boolean
  readonly requests: number
  readonly tokens: number
  readonly seconds: number
  /** The median round's tokens/s. */
  readonly tokensPerSec: number
  /** With Medusa: the median over rounds of (this round's tokens/s / the plain run's just before). */
  readonly speedUp: number | null
  /** With Medusa: tokens emitted per verification row (1 sampled + accepted candidates). */
  readonly tokensPerVerify: number | null
  /** With Medusa: accepted candidates per verification row. */
  readonly acceptedPerVerify: number | null
  /** Median wall time of a step whose rows are all plain decode rows (one token each), ms. */
  readonly plainStepMs: number | null
  /** Median wall time of a step where every row verifies a tree, ms. */
  readonly verifyStepMs: number | null
  /** Mean tokens fed per verification row (the tree size + 1). */
  readonly treeTokens: number | null
}

/** One timed pass over the prompts in one mode. */
interface MedusaRun {
  readonly tokens: number
  readonly seconds: number
  readonly verifies: number
  readonly emitted: number
  readonly accepted: number
  readonly plainMs: number[]
  readonly verifyMs: number[]
  readonly verifyRows: number
  readonly verifyTokens: number
}

/** Step timings sorted by kind, recorded by a runner wrapper. */
class StepClock {
  plain: number[] = []
  verify: number[] = []
  verifyTokens = 0
  verifyRows = 0

  wrap(runner: NativeStepRunner): StepRunner {
    return {
      load: (): Promise<ModelSpec> => runner.load(),
      loadAdapter: (w) => runner.loadAdapter(w),
      unloadAdapter: (slot) => runner.unloadAdapter(slot),
      close: () => runner.close(),
      step: async (batch: StepBatch): Promise<StepOutput> => {
        const t0 = performance.now()
        const out = await runner.step(batch)
        const ms = performance.now() - t0
        const rows = batch.rows
        // Pure decode steps (every row one causal token, no heads) vs pure verification steps
        // (every row a tree of candidates with Medusa heads); mixed and prefill steps are not classified.
        if (rows.length > 0 && rows.every((r) => r.tokens.length === 1 && r.treeMask === undefined && r.medusaSlot < 0))
          this.plain.push(ms)
        else if (
          rows.length > 0 &&
          rows.every((r) => r.tokens.length > 1 && r.treeMask !== undefined && r.medusaSlot >= 0 && r.cacheLen > 0)
        ) {
          this.verify.push(ms)
          this.verifyRows += rows.length
          this.verifyTokens += rows.reduce((n, r) => n + r.tokens.length, 0)
        }
        return out
      },
    }
  }
}

const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  child: () => silentLogger,
}

/** The median, or null for no values (a mode with no step of that kind). */
const medianOrNull = (xs: readonly number[]): number | null => (xs.length === 0 ? null : median(xs))

/** Run every configuration (batch × with/without Medusa) on one engine; rows in that order. */
export async function benchMedusa(o: MedusaBenchOptions): Promise<MedusaRow[]> {
  const maxBatch = Math.max(...o.batches)
  const clock = new StepClock()
  const runner = new NativeStepRunner(o.modelDir, { threads: o.threads, kv_cache_tokens: 16384, kv_block_size: 16 })
  let heads: MedusaWeights | null = null
  const engine = new BatchingEngine({
    runner: clock.wrap(runner),
    limits: { maxBatchSize: maxBatch, maxBatchPrefillTokens: 2048, maxConcurrentRequests: 256 },
    readAdapter: async (adapter, spec) => (heads ??= await readMedusaAdapter(adapter.dir, adapter.resolved.id, spec)),
    logger: silentLogger,
    name: 'bench',
    speculation: { ...(o.choices ? { choices: o.choices } : {}), ...(o.adaptive === false ? { adaptive: false } : {}) },
  })
  const rows: MedusaRow[] = []
  try {
    await engine.start()
    const speculator = await engine.loadAdapter({
      resolved: { source: 'local', id: 'medusa', revision: 'bench', files: [] },
      dir: o.headsDir,
      kind: 'medusa',
    })
    let nextId = 0
    const generate = async (inputIds: readonly number[], medusa: boolean): Promise<number> => {
      const request: BackendRequest = {
        id: `bench-${++nextId}`,
        inputIds: [...inputIds],
        maxNewTokens: o.maxNewTokens,
        sampling: GREEDY_SAMPLING,
        eosTokenIds: [],
        adapter: null,
        speculator: medusa ? speculator : null,
        grammar: null,
        topLogprobs: 0,
        prefillLogprobs: false,
        signal: new AbortController().signal,
      }
      let n = 0
      for await (const e of engine.submit(request)) if (e.type === 'tokens') n += e.tokens.length
      return n
    }
    // Warm-up (untimed): one request plain (first steps allocate, page in the weights) and four
    // with the heads. The adaptive tree policy learns online, engine-wide, from the first Medusa
    // steps; a server does so once in its life, and the bench measures what comes after it.
    await generate(o.prompts[0]!, false)
    for (const prompt of o.prompts.slice(0, 4)) await generate(prompt, true)
    const timeRun = async (batch: number, medusa: boolean): Promise<MedusaRun> => {
      clock.plain = []
      clock.verify = []
      clock.verifyRows = clock.verifyTokens = 0
      const before = engine.speculationStats()
      let tokens = 0
      const started = performance.now()
      // The prompts in groups of `batch`, each group submitted together.
      for (let i = 0; i + batch <= o.prompts.length; i += batch) {
        const counts = await Promise.all(o.prompts.slice(i, i + batch).map((p) => generate(p, medusa)))
        tokens += counts.reduce((a, b) => a + b, 0)
      }
      const seconds = (performance.now() - started) / 1000
      const after = engine.speculationStats()
      return {
        tokens,
        seconds,
        verifies: after.verifySteps - before.verifySteps,
        emitted: after.emittedTokens - before.emittedTokens,
        accepted: after.acceptedTokens - before.acceptedTokens,
        plainMs: [...clock.plain],
        verifyMs: [...clock.verify],
        verifyRows: clock.verifyRows,
        verifyTokens: clock.verifyTokens,
      }
    }
    for (const batch of o.batches) {
      const runs: { plain: MedusaRun; medusa: MedusaRun }[] = []
      for (let r = 0; r < (o.rounds ?? 3); r++)
        runs.push({ plain: await timeRun(batch, false), medusa: await timeRun(batch, true) })
      const ratios = runs.map((x) => x.medusa.tokens / x.medusa.seconds / (x.plain.tokens / x.plain.seconds))
      for (const medusa of [false, true]) {
        const mine = runs.map((x) => (medusa ? x.medusa : x.plain))
        const byRate = [...mine].sort((a, b) => a.tokens / a.seconds - b.tokens / b.seconds)
        const mid = byRate[byRate.length >> 1]!
        const verifies = mine.reduce((n, x) => n + x.verifies, 0)
        const verifyRows = mine.reduce((n, x) => n + x.verifyRows, 0)
        rows.push({
          batch,
          medusa,
          requests: Math.floor(o.prompts.length / batch) * batch,
          tokens: mid.tokens,
          seconds: mid.seconds,
          tokensPerSec: mid.tokens / mid.seconds,
          speedUp: medusa ? medianOrNull(ratios) : null,
          tokensPerVerify: medusa && verifies > 0 ? mine.reduce((n, x) => n + x.emitted, 0) / verifies : null,
          acceptedPerVerify: medusa && verifies > 0 ? mine.reduce((n, x) => n + x.accepted, 0) / verifies : null,
          plainStepMs: medianOrNull(mine.flatMap((x) => x.plainMs)),
          verifyStepMs: medianOrNull(mine.flatMap((x) => x.verifyMs)),
          treeTokens: verifyRows > 0 ? mine.reduce((n, x) => n + x.verifyTokens, 0) / verifyRows : null,
        })
      }
    }
  } finally {
    await engine.close()
  }
  return rows
}

const f = (x: number | null, digits: number): string => (x === null || !Number.isFinite(x) ? '' : x.toFixed(digits))

/** The markdown table, with the speed-up of each Medusa row over the plain row of its batch. */
export function formatMedusaTable(rows: readonly MedusaRow[]): string {
  const lines = [
    '| batch | Medusa | tokens | tokens/s | speed-up | tokens / verify step | accepted / verify step | plain step ms | verify step ms (tree tokens) |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for (const r of rows) {
    lines.push(
      `| ${r.batch} | ${r.medusa ? 'yes' : 'no'} | ${r.tokens} | ${f(r.tokensPerSec, 1)} | ` +
        `${r.medusa ? f(r.speedUp, 2) : '1.00'} | ${f(r.tokensPerVerify, 2)} | ` +
        `${f(r.acceptedPerVerify, 2)} | ${f(r.plainStepMs, 2)} | ` +
        `${r.verifyStepMs === null ? '' : `${f(r.verifyStepMs, 2)} (${f(r.treeTokens, 1)})`} |`,
    )
  }
  return lines.join('\n')
}
