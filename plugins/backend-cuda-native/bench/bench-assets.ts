/**
 * The benchmark's model and adapters: a SmolLM2-135M-shaped random Llama (tied embeddings) in f32
 * and bf16, and rank-16 LoRA adapters on all 7 projections, generated with `@loom/testkit` into a
 * cache folder (`os.tmpdir()/loom-bench`, or `LOOM_BENCH_DIR`) and reused by later runs. A folder
 * counts only once its `.complete` marker exists, so an interrupted build is redone.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { LoraModule, LoraWeights } from '@loom/core'
import { buildLoraAdapter, buildModel, readModelConfig, readReferenceLora, type ModelDtype } from '@loom/testkit'

/** SmolLM2-135M: hidden 576, 30 layers, 9 query / 3 KV heads, intermediate 1536, vocab 49152. */
export const BENCH_SHAPE = {
  hiddenSize: 576,
  intermediateSize: 1536,
  numLayers: 30,
  numHeads: 9,
  numKvHeads: 3,
  headDim: 64,
  vocabSize: 49152,
  maxPositionEmbeddings: 2048,
  tieWordEmbeddings: true,
} as const

export const LORA_RANK = 16
const ALL_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const

/** Bump when the generated content changes, so stale caches are not reused. */
const ASSET_VERSION = 1

export function benchDir(): string {
  return process.env.LOOM_BENCH_DIR ?? path.join(os.tmpdir(), 'loom-bench')
}

/** Build `dir` with `build` unless a complete copy is already there; returns whether it built. */
async function cached(dir: string, build: () => Promise<unknown>): Promise<boolean> {
  const marker = path.join(dir, '.complete')
  if (existsSync(marker)) return false
  rmSync(dir, { recursive: true, force: true })
  await build()
  writeFileSync(marker, new Date().toISOString() + '\n')
  return true
}

/** The model folder for `dtype`, built on first use (seed 0; same values in both dtypes). */
export async function benchModel(dtype: ModelDtype, log: (line: string) => void): Promise<string> {
  const dir = path.join(benchDir(), `smollm2-135m-shape-${dtype}-v${ASSET_VERSION}`)
  const started = Date.now()
  if (await cached(dir, () => buildModel(dir, { arch: 'llama', ...BENCH_SHAPE, dtype, seed: 0 })))
    log(`built ${dir} in ${((Date.now() - started) / 1000).toFixed(1)}s`)
  return dir
}

/**
 * `count` distinct adapters (seeds 1..count), f32, rank 16, alpha 32, on all 7 projections, read
 * back as the contract's `LoraWeights`. The model folder only provides the shape.
 */
export async function benchAdapters(
  modelDir: string,
  count: number,
  log: (line: string) => void,
): Promise<LoraWeights[]> {
  const config = readModelConfig(modelDir)
  const out: LoraWeights[] = []
  let built = 0
  const started = Date.now()
  for (let i = 1; i <= count; i++) {
    const dir = path.join(benchDir(), `lora-r${LORA_RANK}-all7-seed${i}-v${ASSET_VERSION}`)
    if (
      await cached(dir, () =>
        buildLoraAdapter(dir, { model: config, rank: LORA_RANK, alpha: 32, seed: i, targetModules: ALL_MODULES }),
      )
    )
      built++
    const ref = readReferenceLora(dir, config)
    out.push({
      kind: 'lora',
      key: `bench-lora-${i}`,
      layers: ref.layers.map((layer) => {
        const mods: Partial<Record<LoraModule, { rank: number; scale: number; a: Float32Array; b: Float32Array }>> = {}
        for (const [m, w] of Object.entries(layer))
          mods[m as LoraModule] = { rank: w.rank, scale: w.scale, a: Float32Array.from(w.a), b: Float32Array.from(w.b) }
        return mods
      }),
    })
  }
  if (built > 0) log(`built ${built} adapters in ${((Date.now() - started) / 1000).toFixed(1)}s`)
  return out
}
