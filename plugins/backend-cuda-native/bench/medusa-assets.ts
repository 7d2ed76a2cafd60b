/**
 * What the Medusa bench runs on: the demo model and its trained heads (`models/demo`,
 * `models/demo/medusa`; see tools/demo-model/README.md) with held-out Tiny Shakespeare lines as
 * prompts, or, when the heads are not there, a small random model with heads that copy its LM head
 * (the Medusa paper's initialisation) and random prompts — which shows the machinery works but
 * not the speed-up trained heads give. `LOOM_BENCH_MEDUSA_MODEL` / `LOOM_BENCH_MEDUSA_HEADS`
 * point at other folders.
 */
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildModel, ReferenceModel, SeededRandom, writeSafetensors, type TensorToWrite } from '@loom/testkit'
import { HfTokenizerLoader } from '../../../core/src/tokenizer/index.ts'
import { benchDir } from './bench-assets.ts'
import { mkdirSync, writeFileSync } from 'node:fs'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')

export interface MedusaAssets {
  readonly modelDir: string
  readonly headsDir: string
  readonly prompts: number[][]
  /** One line saying what the section measures. */
  readonly description: string
  readonly demo: boolean
}

/** The demo model and heads when present (or the env overrides), else the random fallback. */
export async function medusaAssets(count: number, log: (line: string) => void): Promise<MedusaAssets> {
  const modelDir = process.env.LOOM_BENCH_MEDUSA_MODEL ?? path.join(repoRoot, 'models', 'demo')
  const headsDir = process.env.LOOM_BENCH_MEDUSA_HEADS ?? path.join(modelDir, 'medusa')
  if (existsSync(path.join(modelDir, 'config.json')) && existsSync(path.join(headsDir, 'config.json'))) {
    const prompts = await textPrompts(modelDir, count)
    return {
      modelDir,
      headsDir,
      prompts,
      demo: true,
      description: `${path.relative(repoRoot, modelDir) || modelDir} with heads ${path.relative(repoRoot, headsDir) || headsDir}; prompts: ${prompts.length} held-out Tiny Shakespeare lines`,
    }
  }
  log(`demo heads not found (${headsDir}): the Medusa section runs on a random model with copied-LM-head heads`)
  const fallback = await randomModelWithHeads()
  const rng = new SeededRandom(3)
  const prompts = Array.from({ length: count }, () =>
    Array.from({ length: 8 }, () => 3 + Math.floor(rng.next() * (fallback.vocab - 3))),
  )
  return {
    ...fallback,
    prompts,
    demo: false,
    description:
      `demo heads not found (${path.relative(repoRoot, headsDir)}): random demo-shaped model, 4 heads copying its ` +
      `LM head, random prompts (acceptance here says nothing about trained heads)`,
  }
}

/**
 * Prompts from the held-out tail of Tiny Shakespeare (the last 5 % of the speeches, which the
 * demo model never trained on): the first few words of lines that start a speech.
 */
async function textPrompts(modelDir: string, count: number): Promise<number[][]> {
  const tokenizer = await new HfTokenizerLoader().load(modelDir)
  const textPath = path.join(repoRoot, 'data', 'tinyshakespeare.txt')
  if (!tokenizer || !existsSync(textPath)) throw new Error(`need ${modelDir}/tokenizer.json and ${textPath}`)
  const lines = readFileSync(textPath, 'utf8').split('\n')
  const tail = lines.slice(Math.floor(lines.length * 0.95))
  const out: number[][] = []
  for (let i = 1; i < tail.length && out.length < count; i++) {
    // A speaker line ("NAME:") followed by the first line of the speech.
    if (!/^[A-Z][A-Za-z ]*:$/.test(tail[i - 1]!) || tail[i]!.trim().length < 20) continue
    out.push(tokenizer.encode(`${tail[i - 1]}\n${tail[i]}\n`, { addSpecialTokens: true }))
  }
  return out
}

/** A demo-shaped random Llama (hidden 128, 4 layers, vocab 2048) and version-1 heads copying its LM head. */
async function randomModelWithHeads(): Promise<{ modelDir: string; headsDir: string; vocab: number }> {
  const root = path.join(benchDir(), 'medusa-random-v1')
  const modelDir = path.join(root, 'model')
  const headsDir = path.join(root, 'medusa')
  const H = 128
  const V = 2048
  if (!existsSync(path.join(headsDir, 'config.json'))) {
    await buildModel(modelDir, {
      arch: 'llama',
      hiddenSize: H,
      intermediateSize: 384,
      numLayers: 4,
      numHeads: 4,
      numKvHeads: 2,
      vocabSize: V,
      maxPositionEmbeddings: 512,
      seed: 9,
    })
    const lmHead = Float32Array.from((await ReferenceModel.load(modelDir)).weight('lm_head.weight'))
    const tensors: Record<string, TensorToWrite> = {}
    for (let h = 0; h < 4; h++) {
      // Zero residual block: each head sees the model's own last hidden state.
      tensors[`${h}.0.linear.weight`] = { dtype: 'F32', shape: [H, H], data: new Float32Array(H * H) }
      tensors[`${h}.0.linear.bias`] = { dtype: 'F32', shape: [H], data: new Float32Array(H) }
      tensors[`${h}.1.weight`] = { dtype: 'F32', shape: [V, H], data: lmHead }
    }
    mkdirSync(headsDir, { recursive: true })
    writeSafetensors(path.join(headsDir, 'medusa_lm_head.safetensors'), tensors)
    writeFileSync(
      path.join(headsDir, 'config.json'),
      JSON.stringify({ medusa_num_heads: 4, medusa_num_layers: 1, hidden_size: H, vocab_size: V, version: 1 }, null, 2),
    )
  }
  return { modelDir, headsDir, vocab: V }
}
