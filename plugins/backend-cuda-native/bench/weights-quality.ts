/**
 * What `weights: int8` costs in quality (issue 19, point 1): perplexity of the demo model
 * (`models/demo`, a small Llama trained on Tiny Shakespeare) on the held-out 5% of the corpus's
 * speeches (the split tools/demo-model/corpora.py trains with), through `NativeStepRunner`, for
 * the f32 weights as stored, a bf16 copy of them, and `weights: int8` quantised from each; then
 * the greedy continuation of a held-out prompt under each, to show the text stays word-like.
 *
 *   npx tsx plugins/backend-cuda-native/bench/weights-quality.ts [modelDir] [windowTokens]
 *
 * The held-out speeches are joined as in the corpus (blank lines between), tokenized once, and cut
 * into windows of `windowTokens` (256) tokens; each window is one prefill step that scores every
 * token after the window's first (`scoreTargets`: the raw log-softmax of the next token at each
 * position). Not a test: it prints a table and one JSON line.
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { GREEDY_ROW_SAMPLING, type StepRow } from '@loom/core'
import { readSafetensors, writeSafetensors, type TensorToWrite } from '@loom/testkit'
import { HfTokenizerLoader } from '../../../core/src/tokenizer/index.ts'
import { NativeStepRunner } from '../src/index.ts'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const modelDir = process.argv[2] ?? path.join(repoRoot, 'models', 'demo')
const window = Number(process.argv[3] ?? 256)
const threads = Number(process.env.LOOM_THREADS ?? 2)

/** The held-out speeches of corpora.py's split: the last 5% by position. */
function heldOutText(): string {
  const candidates = [
    path.join(repoRoot, 'data', 'tinyshakespeare.txt'),
    path.join(repoRoot, '..', 'shared', 'data', 'tinyshakespeare.txt'),
  ]
  const file = candidates.find((p) => existsSync(p))
  if (!file) throw new Error(`tinyshakespeare.txt not found in ${candidates.join(' or ')}`)
  const speeches = readFileSync(file, 'utf8')
    .split('\n\n')
    .map((s) => s.replace(/^\n+|\n+$/g, ''))
    .filter((s) => s.trim().length > 0)
  return speeches.slice(Math.floor(speeches.length * 0.95)).join('\n\n')
}

/** A copy of the model folder with every tensor rounded to bf16. */
function bf16Copy(src: string, dst: string): void {
  for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json'])
    if (existsSync(path.join(src, f))) copyFileSync(path.join(src, f), path.join(dst, f))
  const { tensors } = readSafetensors(path.join(src, 'model.safetensors'))
  const out: Record<string, TensorToWrite> = {}
  for (const [name, t] of tensors) out[name] = { dtype: 'BF16', shape: t.shape, data: Float32Array.from(t.data) }
  writeSafetensors(path.join(dst, 'model.safetensors'), out)
}

/**
 * A fresh sequence's row over `tokens`: `score` scores each position's next token (no sampling),
 * else the token after the last position is sampled greedily.
 */
function row(tokens: readonly number[], score: boolean): StepRow {
  const n = tokens.length
  return {
    seqId: 1,
    tokens: Int32Array.from(tokens),
    positions: Int32Array.from(tokens, (_, i) => i),
    cacheLen: 0,
    blockTable: Int32Array.from({ length: Math.ceil(n / 16) }, (_, b) => b),
    loraSlot: -1,
    sampling: score ? null : GREEDY_ROW_SAMPLING,
    scoreTargets: score ? Int32Array.from(tokens, (_, i) => (i + 1 < n ? tokens[i + 1]! : -1)) : new Int32Array(0),
    medusaSlot: -1,
    medusaHeads: 0,
  }
}

const batch = (r: StepRow) => ({ rows: [r], kvCopies: [], topLogprobs: 0, draftTopK: 1 })

interface Variant {
  readonly name: string
  readonly dir: string
  readonly weights: 'auto' | 'int8'
}

async function evaluate(
  v: Variant,
  windows: number[][],
  prompt: number[],
  newTokens: number,
): Promise<{ ppl: number; tokens: number; greedy: number[] }> {
  const runner = new NativeStepRunner(v.dir, {
    threads,
    kv_cache_tokens: Math.max(window, prompt.length + newTokens) + 32,
    max_batch_tokens: Math.max(window, prompt.length + newTokens),
    adapter_slots: 0,
    weights: v.weights,
  })
  try {
    await runner.load()
    let total = 0
    let count = 0
    for (const w of windows) {
      const out = await runner.step(batch(row(w, true)))
      for (const lp of out.scores) total -= lp
      count += out.scores.length
    }
    // Greedy continuation, recomputing the whole sequence each step (no cache bookkeeping needed).
    const seq = [...prompt]
    for (let s = 0; s < newTokens; s++) seq.push((await runner.step(batch(row(seq, false)))).tokens[0]!)
    return { ppl: Math.exp(total / count), tokens: count, greedy: seq.slice(prompt.length) }
  } finally {
    await runner.close()
  }
}

async function main(): Promise<void> {
  const tokenizer = await new HfTokenizerLoader().load(modelDir)
  if (!tokenizer) throw new Error(`no tokenizer in ${modelDir}`)
  const ids = tokenizer.encode(heldOutText(), { addSpecialTokens: false })
  const windows: number[][] = []
  for (let i = 0; i + window <= ids.length; i += window) windows.push(ids.slice(i, i + window))
  const prompt = tokenizer.encode('ROMEO:\nWhat light is this that', { addSpecialTokens: true })
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'loom-weights-quality-'))
  try {
    bf16Copy(modelDir, tmp)
    const variants: Variant[] = [
      { name: 'float32 (as stored)', dir: modelDir, weights: 'auto' },
      { name: 'bfloat16 (rounded copy)', dir: tmp, weights: 'auto' },
      { name: 'int8 from float32', dir: modelDir, weights: 'int8' },
      { name: 'int8 from bfloat16', dir: tmp, weights: 'int8' },
    ]
    const results: { name: string; ppl: number; tokens: number; text: string }[] = []
    for (const v of variants) {
      const r = await evaluate(v, windows, prompt, 48)
      results.push({
        name: v.name,
        ppl: r.ppl,
        tokens: r.tokens,
        text: tokenizer.decode(r.greedy, { skipSpecialTokens: true }),
      })
      console.error(`[quality] ${v.name}: perplexity ${r.ppl.toFixed(4)} over ${r.tokens} tokens`)
    }
    const bf16 = results[1]!.ppl
    console.log(
      `perplexity of ${path.relative(repoRoot, modelDir) || modelDir} on held-out Tiny Shakespeare, ` +
        `${windows.length} windows of ${window} tokens, ${threads} threads, load ${os.loadavg()[0]!.toFixed(2)}`,
    )
    console.log('')
    console.log('| weights | perplexity | vs bfloat16 |')
    console.log('|---|---:|---:|')
    for (const r of results)
      console.log(`| ${r.name} | ${r.ppl.toFixed(4)} | ${((r.ppl / bf16 - 1) * 100).toFixed(2)}% |`)
    console.log('')
    for (const r of results)
      console.log(
        `${r.name}, greedy after ${JSON.stringify('ROMEO:\nWhat light is this that')}: ${JSON.stringify(r.text)}`,
      )
    console.log(JSON.stringify({ bench: 'loom-weights-quality', window, windows: windows.length, results }))
  } finally {
    rmSync(tmp, { recursive: true, force: true })
  }
}

main().catch((err: unknown) => {
  console.error(err)
  process.exitCode = 1
})
