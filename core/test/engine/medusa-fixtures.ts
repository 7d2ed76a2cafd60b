import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { SeededRandom, writeSafetensors, type TensorToWrite } from '@loom/testkit'

/** What `buildMedusaAdapter` writes. */
export interface BuildMedusaOptions {
  readonly hiddenSize: number
  readonly vocabSize: number
  readonly numHeads: number
  /** Default 1. */
  readonly numLayers?: number
  /**
   * Residual blocks: `zero` (W = 0, b = 0: every head's hidden state is the model's own, the
   * Medusa paper's initialisation) or `random` (std `scale / sqrt(hidden)`). Default `zero`.
   */
  readonly blocks?: 'zero' | 'random'
  /** Multiplier of the random blocks' std. Default 1. */
  readonly scale?: number
  /** Per-head LM heads `[vocab, hidden]` (version 1), one per head, or absent (version 2). */
  readonly lmHeads?: readonly Float32Array[]
  /** Prefix every tensor name with `medusa_head.`. Default false. */
  readonly prefixed?: boolean
  /** Default `medusa_lm_head.safetensors`. */
  readonly file?: string
  /** Extra or overriding `config.json` fields. */
  readonly config?: Readonly<Record<string, unknown>>
  /** Tensors to add or replace (full names). */
  readonly extraTensors?: Readonly<Record<string, TensorToWrite>>
  /** Tensors to leave out (full names). */
  readonly omit?: readonly string[]
  readonly seed?: number
}

/** Write a Medusa adapter in LoRAX's layout: `config.json` + safetensors heads. */
export function buildMedusaAdapter(dir: string, opts: BuildMedusaOptions): void {
  const H = opts.hiddenSize
  const layers = opts.numLayers ?? 1
  const rng = new SeededRandom(opts.seed ?? 1)
  const p = opts.prefixed ? 'medusa_head.' : ''
  const tensors: Record<string, TensorToWrite> = {}
  const fill = (n: number, std: number): Float32Array =>
    opts.blocks === 'random' ? rng.normalArray(n, std) : new Float32Array(n)
  const std = (opts.scale ?? 1) / Math.sqrt(H)
  for (let h = 0; h < opts.numHeads; h++) {
    for (let l = 0; l < layers; l++) {
      tensors[`${p}${h}.${l}.linear.weight`] = { dtype: 'F32', shape: [H, H], data: fill(H * H, std) }
      tensors[`${p}${h}.${l}.linear.bias`] = { dtype: 'F32', shape: [H], data: fill(H, std) }
    }
    const own = opts.lmHeads?.[h]
    if (own !== undefined)
      tensors[`${p}${h}.${layers}.weight`] = { dtype: 'F32', shape: [opts.vocabSize, H], data: own }
  }
  for (const name of opts.omit ?? []) delete tensors[name]
  Object.assign(tensors, opts.extraTensors ?? {})
  mkdirSync(dir, { recursive: true })
  const config = {
    medusa_num_heads: opts.numHeads,
    medusa_num_layers: layers,
    hidden_size: H,
    vocab_size: opts.vocabSize,
    base_model_name_or_path: 'testkit/tiny-model',
    version: opts.lmHeads === undefined ? 2 : 1,
    ...opts.config,
  }
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2))
  writeSafetensors(join(dir, opts.file ?? 'medusa_lm_head.safetensors'), tensors)
}
