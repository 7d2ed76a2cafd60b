/**
 * `npm run bench:peers`: Loom's native cpu runtime against llama.cpp (issue 19, point 3) on the
 * same weights, the same threads, in one process, interleaved. Not a test: it prints one markdown
 * table, PASS/FAIL per target and one JSON line, and exits 0 either way.
 *
 * Weights: the SmolLM2-135M-shaped random Llama of `npm run bench` (bench-assets.ts). Loom loads
 * the safetensors folder; llama.cpp loads the same model written as GGUF by our own writer
 * (llama-gguf.ts): f32 → F32 (same values), bf16 → BF16 (the same bits), 8-bit → Q8_0 quantised
 * from the f32 values, against Loom's `weights: int8` over the f32 folder (quantised at load). A
 * weights check runs first per dtype: both engines continue the same 32-token prompt greedily for
 * 16 steps; the tokens should agree and the log-softmax of each chosen token nearly so.
 *
 * llama.cpp: node-llama-cpp (pinned, installed on first use into the cache folder, prebuilt CPU
 * binary, never built or downloaded from elsewhere: see node-llama-cpp.ts), default context
 * settings (f16 KV cache, flash attention `auto`), `threads` min = ideal = Loom's threads.
 *
 * Each cell, per engine, per round (tokens/s from the round's median):
 * - decode B=1: a fresh sequence gets an 8-token prompt (untimed), then 2 warm-up and
 *   LOOM_BENCH_STEPS timed steps; a step feeds one token and returns the greedy next token (Loom:
 *   `NativeStepRunner.step`, sampling on the runtime; llama.cpp: `controlledEvaluate` of one
 *   token with greedy sampling, temperature 0). Step wall time from the JS call to its result,
 *   both through their Node bindings. tokens/s = 1000 / step ms.
 * - decode B=8: the same with 8 sequences, all 8 tokens in one step (Loom: one step of 8 rows;
 *   llama.cpp: one `llama_decode` of 8 tokens of 8 sequences of one context, then 8 greedy
 *   samples). tokens/s = 8000 / step ms.
 * - prefill 256: an empty sequence gets a 256-token prompt in one step and samples the token after
 *   it (logits for the last position only on both sides); LOOM_BENCH_PREFILLS timed prefills.
 *   tokens/s = 256000 / ms.
 * The token ids fed are the same on both sides (bench-tokens.ts). Within a round the two engines
 * alternate per cell and the order flips every round. The ratio is the median over rounds of the
 * two engines' figures in the same round; the best-round ratio is shown beside it. The DRAM
 * roofline of a decode B=1 step is the bytes it must read (step-bytes.ts: weights in their stored
 * size, 34 bytes per 32 for both 8-bit formats, the KV history, norms) over the best measured read
 * bandwidth (before and after), and the share is that time over the best round's step time.
 *
 * Targets (issue 19): 8-bit decode B=1 ≥ 1.0× Q8_0; bf16 prefill ≥ 1.0×; f32 and bf16 decode at
 * B=1 and B=8 ≥ 1.0×; each dtype's decode B=1 ≥ 75% of its roofline. Until the runtime accepts
 * `weights: int8` (checked on its options schema), the 8-bit Loom cells print n/a and fail.
 *
 * Knobs (environment): LOOM_THREADS (default all cores), LOOM_BENCH_ROUNDS (5), LOOM_BENCH_STEPS
 * (16), LOOM_BENCH_PREFILLS (2), LOOM_BENCH_PEER_DTYPES (`f32,bf16,8-bit`), LOOM_BENCH_DIR (cache
 * of models, GGUF files and node-llama-cpp; default `os.tmpdir()/loom-bench`).
 */
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { ModelSpec } from '@loom/core'
import { loadNative, NativeStepRunner } from '../../src/index.ts'
import { defaultThreads, nativeOptionsSchema, type NativeOptionsInput } from '../../src/runner-options.ts'
import { benchDir, benchModel } from '../bench-assets.ts'
import { median } from '../bench-report.ts'
import { decodeStepBytes } from '../step-bytes.ts'
import { benchToken } from './bench-tokens.ts'
import { LlamaCppPeer } from './llama-cpp-timer.ts'
import { cachedLlamaGguf, type GgufVariant } from './llama-gguf.ts'
import { loomDecode, loomGreedy, loomPrefill } from './loom-timer.ts'
import { cpuLlama, loadNodeLlamaCpp, NODE_LLAMA_CPP_VERSION, type Llama } from './node-llama-cpp.ts'
import {
  formatPeerTables,
  judgePeers,
  peerCell,
  PEER_MEASURES,
  type PeerCell,
  type PeerDtype,
  type PeerMeasure,
  type WeightsCheck,
} from './peer-report.ts'

const envInt = (name: string, dflt: number): number => {
  const v = Number(process.env[name])
  return Number.isInteger(v) && v > 0 ? v : dflt
}

const threads = defaultThreads()
const rounds = envInt('LOOM_BENCH_ROUNDS', 5)
const timedSteps = envInt('LOOM_BENCH_STEPS', 16)
const prefills = envInt('LOOM_BENCH_PREFILLS', 2)
const dtypes = (process.env.LOOM_BENCH_PEER_DTYPES ?? 'f32,bf16,8-bit')
  .split(',')
  .map((s) => s.trim())
  .filter(Boolean) as PeerDtype[]
const promptTokens = 8
const warmupSteps = 2
const prefillTokens = 256
const maxBatch = 8
const blockSize = 16
const checkPrompt = 32
const checkSteps = 16
/** Bump when the GGUF writer's output changes, so cached files are rewritten. */
const GGUF_VERSION = 1

const log = (line: string): void => console.error(`[bench:peers] ${line}`)
const out = (text: string): void => void process.stdout.write(text + '\n')

/** How each dtype is stored on each side. */
const SIDES: Record<PeerDtype, { folder: 'float32' | 'bfloat16'; gguf: GgufVariant; bytes: number; int8: boolean }> = {
  f32: { folder: 'float32', gguf: 'F32', bytes: 4, int8: false },
  bf16: { folder: 'bfloat16', gguf: 'BF16', bytes: 2, int8: false },
  // Q8_0: a 2-byte scale per 32 int8 values; Loom's int8 is taken to store the same.
  '8-bit': { folder: 'float32', gguf: 'Q8_0', bytes: 34 / 32, int8: true },
}

/** Whether this runtime's options accept `weights: int8` (another change adds it). */
function int8Available(): boolean {
  return nativeOptionsSchema.safeParse({ weights: 'int8' }).success
}

async function bandwidth(): Promise<number[]> {
  return loadNative().measureReadBandwidth(512 * 2 ** 20, threads, 16)
}

const perSecond = (tokens: number, ms: readonly number[]): number => (tokens * 1000) / median(ms)

interface Engines {
  loom: NativeStepRunner | null
  spec: ModelSpec | null
  peer: LlamaCppPeer
}

/** One round of one cell on one engine: tokens/s from the round's median. */
async function measure(e: Engines, engine: 'loom' | 'llama', m: PeerMeasure): Promise<number> {
  const batch = m === 'decode B=8' ? 8 : 1
  if (m === 'prefill 256') {
    const ms =
      engine === 'loom'
        ? await loomPrefill(e.loom!, { promptTokens: prefillTokens, repeats: prefills, blockSize })
        : await e.peer.prefill({ promptTokens: prefillTokens, repeats: prefills })
    return perSecond(prefillTokens, ms)
  }
  const o = { batch, promptTokens, warmupSteps, timedSteps }
  const ms = engine === 'loom' ? await loomDecode(e.loom!, { ...o, blockSize }) : await e.peer.decode(o)
  return perSecond(batch, ms)
}

async function weightsCheck(e: Engines, dtype: PeerDtype): Promise<WeightsCheck> {
  const prompt = Array.from({ length: checkPrompt }, (_, p) => benchToken(5, p))
  const a = await loomGreedy(e.loom!, prompt, checkSteps, blockSize)
  const b = await e.peer.greedy(prompt, checkSteps)
  let same = 0
  let maxDiff = 0
  for (let i = 0; i < a.tokens.length; i++) {
    if (a.tokens[i] !== b.tokens[i]) break // after a divergence the inputs differ
    same++
    maxDiff = Math.max(maxDiff, Math.abs(a.logprobs[i]! - b.logprobs[i]!))
  }
  return { dtype, steps: a.tokens.length, sameTokens: same, maxLogprobDiff: maxDiff }
}

/** What one dtype's run gives: per cell and engine, tokens/s per round. */
interface DtypeRun {
  readonly dtype: PeerDtype
  readonly perRound: Map<string, number[]>
  readonly loomMissing: string | null
  /** The model's spec as Loom loaded it (null when Loom could not run this dtype). */
  readonly spec: ModelSpec | null
  readonly check: WeightsCheck | null
  readonly llamaContext: string
}

async function benchDtype(llama: Llama, dtype: PeerDtype): Promise<DtypeRun> {
  const side = SIDES[dtype]
  const modelDir = await benchModel(side.folder, log)
  const ggufFile = path.join(
    benchDir(),
    'peers',
    'gguf',
    `${path.basename(modelDir)}-${side.gguf}-v${GGUF_VERSION}.gguf`,
  )
  const started = Date.now()
  if (cachedLlamaGguf(modelDir, side.gguf, ggufFile))
    log(`wrote ${ggufFile} in ${((Date.now() - started) / 1000).toFixed(1)}s`)
  const loomMissing = side.int8 && !int8Available() ? 'weights: int8 not available' : null
  const model = await llama.loadModel({ modelPath: ggufFile, gpuLayers: 0 })
  let peer: LlamaCppPeer | null = null
  let loom: NativeStepRunner | null = null
  try {
    peer = await LlamaCppPeer.open(model, threads, 512, maxBatch)
    let spec: ModelSpec | null = null
    if (!loomMissing) {
      const options = {
        threads,
        kv_block_size: blockSize,
        kv_cache_tokens: 1024,
        max_batch_tokens: prefillTokens,
        adapter_slots: 0,
        ...(side.int8 ? { weights: 'int8' } : {}),
      } as NativeOptionsInput
      loom = new NativeStepRunner(modelDir, options)
      spec = await loom.load()
    }
    const e: Engines = { loom, spec, peer }
    const check = loom ? await weightsCheck(e, dtype) : null
    if (check) log(`${dtype}: weights check ${check.sameTokens}/${check.steps} greedy tokens equal`)
    const engines: ('loom' | 'llama')[] = loom ? ['loom', 'llama'] : ['llama']
    // One untimed pass of everything first: page faults on the mapped weights, lazy allocations.
    for (const m of PEER_MEASURES) for (const engine of engines) await measure(e, engine, m)
    const perRound = new Map<string, number[]>()
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? engines : [...engines].reverse()
      for (const m of PEER_MEASURES)
        for (const engine of order) {
          // A short pause between engines: neither one's spinning workers overlap the other's step.
          await sleep(5)
          const key = `${engine}|${m}`
          perRound.set(key, [...(perRound.get(key) ?? []), await measure(e, engine, m)])
        }
      log(`${dtype}: round ${r + 1}/${rounds} done (load average ${os.loadavg()[0]!.toFixed(2)})`)
    }
    return { dtype, perRound, loomMissing, spec, check, llamaContext: peer.describe() }
  } finally {
    await loom?.close()
    await peer?.dispose()
    await model.dispose()
  }
}

async function main(): Promise<void> {
  const started = Date.now()
  const load0 = os.loadavg()
  const cpu = os.cpus()[0]?.model ?? 'cpu'
  log(`${cpu}, ${threads} threads, load average ${load0.map((x) => x.toFixed(2)).join(' ')}; cache ${benchDir()}`)
  const nlc = await loadNodeLlamaCpp(path.join(benchDir(), 'peers'), log)
  const llama = await cpuLlama(nlc, threads, log)
  const release = `${llama.llamaCppRelease.repo}@${llama.llamaCppRelease.release}`
  log(`llama.cpp ${release} (${llama.buildType} binary, gpu ${String(llama.gpu)})`)
  const bw = await bandwidth()
  log(`read bandwidth ${Math.max(...bw).toFixed(1)} GB/s best, ${median(bw).toFixed(1)} median`)
  const runs: DtypeRun[] = []
  try {
    for (const dtype of dtypes) runs.push(await benchDtype(llama, dtype))
  } finally {
    await llama.dispose()
  }
  bw.push(...(await bandwidth()))
  const bwBest = Math.max(...bw)
  // Every dtype has the same shape: any loaded spec gives a decode step's bytes at a dtype's size.
  const spec = runs.find((r) => r.spec !== null)?.spec ?? null
  const rooflineMs = (dtype: PeerDtype): number | null =>
    spec === null
      ? null
      : (decodeStepBytes(spec, SIDES[dtype].bytes, promptTokens + warmupSteps + timedSteps / 2, 0) / (bwBest * 1e9)) *
        1000
  const cells: PeerCell[] = runs.flatMap((r) =>
    PEER_MEASURES.map((m) =>
      peerCell(
        r.dtype,
        m,
        r.perRound.get(`loom|${m}`) ?? null,
        r.loomMissing,
        r.perRound.get(`llama|${m}`)!,
        m === 'decode B=1' ? rooflineMs(r.dtype) : null,
      ),
    ),
  )
  const checks = runs.flatMap((r) => (r.check ? [r.check] : []))
  const llamaContext = runs[0]?.llamaContext ?? ''
  const targets = judgePeers(cells)
  const load1 = os.loadavg()
  const date = new Date().toISOString()
  out(`## Loom vs llama.cpp on the CPU, ${date}`)
  out('')
  out(
    `${cpu}, ${threads} threads each; llama.cpp ${release} via node-llama-cpp ${NODE_LLAMA_CPP_VERSION} (${llamaContext}); ` +
      `read bandwidth ${bwBest.toFixed(1)} GB/s best (median ${median(bw).toFixed(1)}); load average (1/5/15 min) ` +
      `${load0.map((x) => x.toFixed(2)).join(' ')} -> ${load1.map((x) => x.toFixed(2)).join(' ')}; ${rounds} rounds x ` +
      `${timedSteps} decode steps / ${prefills} prefills per cell and engine, interleaved`,
  )
  out('')
  out(formatPeerTables(cells, checks, targets))
  out('')
  const cores = os.availableParallelism()
  if (Math.max(load0[0]!, load1[0]!) > cores)
    out(
      `Load average above the ${cores} cores: other processes shared them. llama.cpp's threads wait for each ` +
        `other at every op by spinning, so a descheduled thread stalls the rest for a time slice; under such load ` +
        `its figures (and the bandwidth, so the roofline shares) say more about the load than about the engine. ` +
        `Rerun on a quiet machine (or compare with LOOM_THREADS=1) before reading the ratios.\n`,
    )
  const passed = targets.filter((t) => t.pass).length
  out(`${passed}/${targets.length} targets pass; ran ${((Date.now() - started) / 1000).toFixed(0)}s`)
  out(
    JSON.stringify({
      bench: 'loom-vs-llama.cpp',
      date,
      cpu,
      threads,
      llamaCpp: { release, nodeLlamaCpp: NODE_LLAMA_CPP_VERSION, context: llamaContext },
      loadAverage: { before: load0, after: load1 },
      bandwidthGBs: { best: bwBest, median: median(bw), runs: bw },
      rounds,
      timedSteps,
      prefills,
      cells,
      checks,
      targets,
    }),
  )
}

main().catch((err: unknown) => {
  console.error(err)
  process.exitCode = 1
})
