/**
 * Writes `models/tiny/`: the small random Llama model (and two LoRA adapters for it) that
 * `config/default.yaml` serves until the trained demo model replaces it. Deterministic: running it
 * again rewrites the same bytes. Usage: `node --import tsx tools/make-tiny-model.ts [outDir]`.
 */
import { rm } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { buildLoraAdapter, buildModel } from '@loom/testkit'

const out = resolve(process.argv[2] ?? 'models/tiny')
await rm(out, { recursive: true, force: true })
const config = await buildModel(out, {
  arch: 'llama',
  hiddenSize: 64,
  intermediateSize: 128,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  maxPositionEmbeddings: 1024,
  seed: 7,
})
const all = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const
await buildLoraAdapter(join(out, 'adapters', 'alpha'), {
  model: config,
  rank: 8,
  alpha: 16,
  seed: 1,
  targetModules: all,
})
await buildLoraAdapter(join(out, 'adapters', 'beta'), { model: config, rank: 4, alpha: 8, seed: 2 })
console.warn(`wrote ${out}`)
