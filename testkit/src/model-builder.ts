/**
 * Writes tiny, deterministic Hugging Face model folders (Llama, Mistral, Qwen2 layouts) and PEFT
 * LoRA adapters for them. Every tensor is drawn from its own stream seeded by `(seed, name)`, so
 * changing the dtype, the sharding or `tie_word_embeddings` leaves the other tensors' values alone.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { SeededRandom } from './random.ts'
import { dtypeBytes, safetensorsDtypeOf, writeSafetensors, type TensorToWrite } from './safetensors-writer.ts'
import { writeTokenizer, type TokenizerBuildOptions } from './tokenizer-builder.ts'
import {
  PROJECTIONS,
  projectionShape,
  readModelConfig,
  type HfModelConfig,
  type ModelArch,
  type ModelDtype,
  type Projection,
  type RopeScaling,
} from './model-config.ts'
import { findPatternKey, peftModuleName } from './peft-pattern.ts'

/** Options for `buildModel`; every field has a small default. */
export interface BuildModelOptions {
  /** Default `llama`. `qwen2` adds q/k/v biases. */
  readonly arch?: ModelArch
  /** Default 64. */
  readonly hiddenSize?: number
  /** Default 128. */
  readonly intermediateSize?: number
  /** Default 2. */
  readonly numLayers?: number
  /** Default 4. */
  readonly numHeads?: number
  /** Default 2 (grouped-query attention). */
  readonly numKvHeads?: number
  /** Default `hiddenSize / numHeads`. */
  readonly headDim?: number
  /** Rows of the embedding; at least the tokenizer's size, which is the default. */
  readonly vocabSize?: number
  /** Default 512. */
  readonly maxPositionEmbeddings?: number
  /** Default 10000. */
  readonly ropeTheta?: number
  /** Default none. */
  readonly ropeScaling?: RopeScaling | null
  /** Default 1e-5. */
  readonly rmsNormEps?: number
  /** Default false. */
  readonly tieWordEmbeddings?: boolean
  /** Storage dtype of the weights. Default `float32`. */
  readonly dtype?: ModelDtype
  /** Default 0. */
  readonly seed?: number
  /** Split the weights over this many `model-0000i-of-0000n.safetensors` files. Default 1. */
  readonly shards?: number
  /** Tokenizer options (see `writeTokenizer`). */
  readonly tokenizer?: TokenizerBuildOptions
  /** `generation_config.json`'s `eos_token_id`; a list when several. Default the tokenizer's EOS. */
  readonly generationEosTokenIds?: readonly number[]
  /** Extra `generation_config.json` fields (e.g. `temperature`). */
  readonly generationConfig?: Readonly<Record<string, unknown>>
}

const ARCHITECTURES: Record<ModelArch, string> = {
  llama: 'LlamaForCausalLM',
  mistral: 'MistralForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
}

/** FNV-1a over the seed and a tensor name: one independent random stream per tensor. */
function tensorSeed(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ seed
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193)
  return h >>> 0
}

function normal(seed: number, name: string, count: number, std: number, mean = 0): Float32Array {
  return new SeededRandom(tensorSeed(seed, name)).normalArray(count, std, mean)
}

/** Generate the model's tensors (f32 values) in the usual Hugging Face order. */
export function generateModelTensors(
  config: HfModelConfig,
  seed: number,
): Map<string, { shape: number[]; data: Float32Array }> {
  const h = config.hidden_size
  const layers = config.num_hidden_layers
  const out = new Map<string, { shape: number[]; data: Float32Array }>()
  const add = (name: string, shape: number[], std: number, mean = 0): void => {
    out.set(name, {
      shape,
      data: normal(
        seed,
        name,
        shape.reduce((a, b) => a * b, 1),
        std,
        mean,
      ),
    })
  }
  // Scales: inputs to every projection are RMS-normalised (O(1) per element), so std 1/sqrt(fan_in)
  // keeps q/k/v/gate/up outputs O(1); the residual branches (o, down) are shrunk by 1/sqrt(2·layers)
  // so the residual stream stays O(1) however deep the model; logits come out with std ≈ 3, peaked
  // enough that greedy choices are stable under f32 rounding but far from one-hot.
  const residualGain = 1 / Math.sqrt(2 * layers)
  add('model.embed_tokens.weight', [config.vocab_size, h], 3 / Math.sqrt(h))
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}`
    add(`${p}.input_layernorm.weight`, [h], 0.1, 1)
    for (const m of PROJECTIONS) {
      const [o, i] = projectionShape(config, m)
      const block = m === 'gate_proj' || m === 'up_proj' || m === 'down_proj' ? 'mlp' : 'self_attn'
      const gain = m === 'o_proj' || m === 'down_proj' ? residualGain : 1
      add(`${p}.${block}.${m}.weight`, [o, i], gain / Math.sqrt(i))
      if (config.model_type === 'qwen2' && (m === 'q_proj' || m === 'k_proj' || m === 'v_proj')) {
        add(`${p}.${block}.${m}.bias`, [o], 0.1)
      }
    }
    add(`${p}.post_attention_layernorm.weight`, [h], 0.1, 1)
  }
  add('model.norm.weight', [h], 0.1, 1)
  if (!config.tie_word_embeddings) add('lm_head.weight', [config.vocab_size, h], 3 / Math.sqrt(h))
  return out
}

/**
 * Write `tensors` as `model.safetensors`, or as `shards` files plus `model.safetensors.index.json`
 * (tensors kept in order, split into runs of roughly equal size).
 */
export function writeModelWeights(
  dir: string,
  tensors: Map<string, { shape: readonly number[]; data: Float32Array }>,
  dtype: ModelDtype,
  shards = 1,
): void {
  const stDtype = safetensorsDtypeOf(dtype)
  const entries = [...tensors.entries()]
  if (shards <= 1) {
    const all: Record<string, TensorToWrite> = {}
    for (const [name, t] of entries) all[name] = { dtype: stDtype, shape: t.shape, data: t.data }
    writeSafetensors(join(dir, 'model.safetensors'), all)
    return
  }
  if (shards > entries.length) throw new Error(`cannot split ${entries.length} tensors into ${shards} shards`)
  const totalValues = entries.reduce((s, [, t]) => s + t.data.length, 0)
  const weightMap: Record<string, string> = {}
  const pad = (n: number): string => String(n).padStart(5, '0')
  let index = 0
  let written = 0
  for (let s = 0; s < shards; s++) {
    const file = `model-${pad(s + 1)}-of-${pad(shards)}.safetensors`
    const part: Record<string, TensorToWrite> = {}
    const target = (totalValues * (s + 1)) / shards
    // Take at least one tensor, leave at least one per remaining shard.
    do {
      const [name, t] = entries[index++]!
      part[name] = { dtype: stDtype, shape: t.shape, data: t.data }
      weightMap[name] = file
      written += t.data.length
    } while (index < entries.length - (shards - s - 1) && (s === shards - 1 || written < target))
    writeSafetensors(join(dir, file), part)
  }
  const index_ = { metadata: { total_size: totalValues * dtypeBytes(stDtype) }, weight_map: weightMap }
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify(index_, null, 2))
}

/**
 * Write a complete model folder into `dir`: `config.json`, `generation_config.json`,
 * `tokenizer.json`, `tokenizer_config.json` and the weights. Returns the config written.
 */
export async function buildModel(dir: string, opts: BuildModelOptions = {}): Promise<HfModelConfig> {
  safetensorsDtypeOf(opts.dtype ?? 'float32') // an unknown dtype fails here, before anything is written
  mkdirSync(dir, { recursive: true })
  const tok = writeTokenizer(dir, opts.tokenizer)
  const arch = opts.arch ?? 'llama'
  const hiddenSize = opts.hiddenSize ?? 64
  const numHeads = opts.numHeads ?? 4
  const vocabSize = opts.vocabSize ?? tok.vocabSize
  if (vocabSize < tok.vocabSize)
    throw new Error(`vocabSize ${vocabSize} is smaller than the tokenizer (${tok.vocabSize})`)
  const numKvHeads = opts.numKvHeads ?? Math.min(2, numHeads)
  if (numHeads % numKvHeads !== 0) throw new Error(`numHeads ${numHeads} is not a multiple of numKvHeads ${numKvHeads}`)
  const headDim = opts.headDim ?? hiddenSize / numHeads
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) throw new Error(`headDim ${headDim} must be an even integer`)
  const dtype = opts.dtype ?? 'float32'
  const config: HfModelConfig = {
    architectures: [ARCHITECTURES[arch]],
    model_type: arch,
    hidden_size: hiddenSize,
    intermediate_size: opts.intermediateSize ?? 2 * hiddenSize,
    num_hidden_layers: opts.numLayers ?? 2,
    num_attention_heads: numHeads,
    num_key_value_heads: numKvHeads,
    head_dim: headDim,
    vocab_size: vocabSize,
    max_position_embeddings: opts.maxPositionEmbeddings ?? 512,
    rms_norm_eps: opts.rmsNormEps ?? 1e-5,
    rope_theta: opts.ropeTheta ?? 10000,
    rope_scaling: opts.ropeScaling ?? null,
    tie_word_embeddings: opts.tieWordEmbeddings ?? false,
    torch_dtype: dtype,
    bos_token_id: tok.bosTokenId,
    eos_token_id: tok.eosTokenId,
    hidden_act: 'silu',
    initializer_range: 0.02,
    use_cache: true,
    ...(arch === 'llama' ? { attention_bias: false, mlp_bias: false, pretraining_tp: 1 } : {}),
    ...(arch === 'mistral' ? { sliding_window: null } : {}),
    ...(arch === 'qwen2' ? { use_sliding_window: false, sliding_window: null, max_window_layers: 0 } : {}),
    transformers_version: '4.46.0',
  }
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2))
  const eos = opts.generationEosTokenIds ?? [tok.eosTokenId]
  const generation = {
    bos_token_id: tok.bosTokenId,
    eos_token_id: eos.length === 1 ? eos[0] : [...eos],
    ...opts.generationConfig,
  }
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify(generation, null, 2))
  writeModelWeights(dir, generateModelTensors(config, opts.seed ?? 0), dtype, opts.shards ?? 1)
  return config
}

/** Options for `buildLoraAdapter`. */
export interface BuildLoraOptions {
  /** The base model: its config object (as `buildModel` returns) or its folder. */
  readonly model: HfModelConfig | string
  /** Default 8. */
  readonly rank?: number
  /** Default 16. */
  readonly alpha?: number
  /** Default `['q_proj', 'k_proj', 'v_proj', 'o_proj']`. */
  readonly targetModules?: readonly Projection[]
  /** Scale by `alpha / sqrt(r)` instead of `alpha / r`. Default false. */
  readonly useRslora?: boolean
  /** Default 0. */
  readonly seed?: number
  /** Only these layers (written as `layers_to_transform`). Default all. */
  readonly layers?: readonly number[]
  /** Storage dtype. Default `float32`. */
  readonly dtype?: ModelDtype
  /** PEFT `rank_pattern`: module-name pattern → rank. */
  readonly rankPattern?: Readonly<Record<string, number>>
  /** PEFT `alpha_pattern`: module-name pattern → alpha. */
  readonly alphaPattern?: Readonly<Record<string, number>>
  /** Default `testkit/tiny-model`. */
  readonly baseModelNameOrPath?: string
  /** Multiplies the std of B (1 = the low-rank update is about as large as the base projection). */
  readonly initScale?: number
}

/** The `adapter_config.json` fields the test kit writes. */
export interface PeftLoraConfig {
  readonly peft_type: 'LORA'
  readonly task_type: 'CAUSAL_LM'
  readonly r: number
  readonly lora_alpha: number
  readonly target_modules: readonly string[]
  readonly use_rslora: boolean
  readonly base_model_name_or_path: string
  readonly rank_pattern: Readonly<Record<string, number>>
  readonly alpha_pattern: Readonly<Record<string, number>>
  readonly [extra: string]: unknown
}

/**
 * Write a PEFT LoRA adapter (`adapter_config.json` + `adapter_model.safetensors`) for a model.
 * Both A and B are random (unlike PEFT's zero-initialised B) so the adapter changes outputs.
 * Returns the adapter config written.
 */
export async function buildLoraAdapter(dir: string, opts: BuildLoraOptions): Promise<PeftLoraConfig> {
  const config = typeof opts.model === 'string' ? readModelConfig(opts.model) : opts.model
  const r = opts.rank ?? 8
  const alpha = opts.alpha ?? 16
  const targets = opts.targetModules ?? ['q_proj', 'k_proj', 'v_proj', 'o_proj']
  const seed = opts.seed ?? 0
  const layers = opts.layers ?? Array.from({ length: config.num_hidden_layers }, (_, l) => l)
  const rankPattern = opts.rankPattern ?? {}
  const initScale = opts.initScale ?? 1
  const stDtype = safetensorsDtypeOf(opts.dtype ?? 'float32')
  const tensors: Record<string, TensorToWrite> = {}
  for (const l of layers) {
    if (l < 0 || l >= config.num_hidden_layers)
      throw new Error(`layer ${l} is outside the model's ${config.num_hidden_layers}`)
    for (const m of targets) {
      const name = peftModuleName(l, m)
      const key = findPatternKey(Object.keys(rankPattern), name)
      const rank = key === null ? r : rankPattern[key]!
      const [outF, inF] = projectionShape(config, m)
      const prefix = `base_model.model.${name}`
      tensors[`${prefix}.lora_A.weight`] = {
        dtype: stDtype,
        shape: [rank, inF],
        data: normal(seed, `${prefix}.lora_A`, rank * inF, 1 / Math.sqrt(inF)),
      }
      // B·(A x) has std ≈ std(B)·sqrt(rank): 0.5/sqrt(rank) makes the update ≈ 0.5 · scale.
      tensors[`${prefix}.lora_B.weight`] = {
        dtype: stDtype,
        shape: [outF, rank],
        data: normal(seed, `${prefix}.lora_B`, outF * rank, (0.5 * initScale) / Math.sqrt(rank)),
      }
    }
  }
  const adapterConfig: PeftLoraConfig = {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    r,
    lora_alpha: alpha,
    lora_dropout: 0,
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    target_modules: [...targets],
    use_rslora: opts.useRslora ?? false,
    use_dora: false,
    base_model_name_or_path: opts.baseModelNameOrPath ?? 'testkit/tiny-model',
    rank_pattern: rankPattern,
    alpha_pattern: opts.alphaPattern ?? {},
    layers_to_transform: opts.layers === undefined ? null : [...opts.layers],
    layers_pattern: null,
    modules_to_save: null,
    revision: null,
  }
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify(adapterConfig, null, 2))
  writeSafetensors(join(dir, 'adapter_model.safetensors'), tensors)
  return adapterConfig
}
