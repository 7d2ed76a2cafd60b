/**
 * Reads a PEFT LoRA adapter directory (`adapter_config.json` + `adapter_model.safetensors` or
 * `adapter_model.bin`) into the runtime's `LoraWeights`, checking it against the loaded model:
 * target modules, layer indices, every tensor's shape, rank limits, and finite values. Both weight
 * formats become the same `AdapterTensors` map, so one validation serves both. Every failure is an
 * `adapter_invalid` naming the adapter and what does not fit.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import {
  LORA_MODULES,
  type LoraModule,
  type LoraModuleWeights,
  type LoraWeights,
  type ModelSpec,
} from '../contracts/step-runner.ts'
import { LoomError } from '../errors/index.ts'
import { findPatternKey } from './peft-pattern.ts'
import { projectionShape } from './projection-shape.ts'
import { SafetensorsFile } from './safetensors.ts'
import { TorchStateDict } from './torch-bin/torch-state-dict.ts'

/** The tensors of an adapter's weight file, whichever format it was stored in. */
export interface AdapterTensors {
  /** The file name, for error messages. */
  readonly file: string
  /** Tensor names in file order. */
  names(): string[]
  /** A tensor's shape, or undefined when it is absent. */
  shape(name: string): readonly number[] | undefined
  /** A tensor's values as a fresh, contiguous f32 array. */
  float32(name: string): Float32Array
}

/** The `adapter_config.json` fields that decide how the weights are applied. */
interface PeftLoraConfig {
  readonly r: number
  readonly alpha: number
  readonly useRslora: boolean
  readonly rankPattern: Readonly<Record<string, number>>
  readonly alphaPattern: Readonly<Record<string, number>>
}

const MLP_MODULES: readonly string[] = ['gate_proj', 'up_proj', 'down_proj']

// `base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`, optionally with the adapter's
// name before `.weight` (`lora_A.default.weight`), as some training scripts save it.
const KEY_RE = /^(?:base_model\.model\.)?model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_(A|B)(?:\.[\w-]+)?\.weight$/

function fail(id: string, detail: string): LoomError {
  return new LoomError('adapter_invalid', { id, detail })
}

const isPositiveInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0
/**
 * Largest `lora_alpha` accepted. Real adapters use alphas near their rank; a huge one (1e308)
 * passed "finite and positive", loaded, and overflowed f32 on every request.
 */
const MAX_LORA_ALPHA = 1e6
const isAlpha = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v > 0 && v <= MAX_LORA_ALPHA

function numberMap(id: string, field: string, value: unknown, check: (v: unknown) => boolean): Record<string, number> {
  if (value === undefined || value === null) return {}
  if (typeof value !== 'object' || Array.isArray(value))
    throw fail(id, `adapter_config.json: ${field} is not an object`)
  for (const [k, v] of Object.entries(value)) {
    if (!check(v)) throw fail(id, `adapter_config.json: ${field}[${JSON.stringify(k)}] is ${JSON.stringify(v)}`)
  }
  return value as Record<string, number>
}

/** Parse and check `adapter_config.json`. */
async function readPeftConfig(dir: string, id: string): Promise<PeftLoraConfig> {
  const path = join(dir, 'adapter_config.json')
  if (!existsSync(path)) throw fail(id, 'adapter_config.json is missing')
  let raw: unknown
  try {
    raw = JSON.parse(await readFile(path, 'utf8'))
  } catch (err) {
    throw fail(id, `adapter_config.json is not valid JSON (${err instanceof Error ? err.message : String(err)})`)
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw fail(id, 'adapter_config.json is not an object')
  const c = raw as Record<string, unknown>
  const peftType = c.peft_type ?? 'LORA'
  if (typeof peftType !== 'string' || peftType.toUpperCase() !== 'LORA') {
    throw fail(id, `peft_type ${JSON.stringify(peftType)} is not supported; only LORA adapters are`)
  }
  if (c.use_dora === true) throw fail(id, 'DoRA adapters (use_dora: true) are not supported')
  if (c.fan_in_fan_out === true) throw fail(id, 'fan_in_fan_out: true (Conv1D layout) is not supported for this model')
  if (c.bias !== undefined && c.bias !== null && c.bias !== 'none') {
    throw fail(id, `bias ${JSON.stringify(c.bias)} is not supported; only adapters trained with bias "none" are`)
  }
  if (Array.isArray(c.modules_to_save) && c.modules_to_save.length > 0) {
    throw fail(
      id,
      `modules_to_save (${c.modules_to_save.join(', ')}) is not supported: only LoRA projections are applied`,
    )
  }
  // target_modules is a list of names, or a regex string (then the weights say what is targeted).
  if (Array.isArray(c.target_modules)) {
    const unknown = c.target_modules.filter((m) => !(LORA_MODULES as readonly unknown[]).includes(m))
    if (unknown.length > 0) {
      throw fail(
        id,
        `target_modules ${unknown.map((m) => JSON.stringify(m)).join(', ')} cannot be adapted; supported: ${LORA_MODULES.join(', ')}`,
      )
    }
  }
  const r = c.r ?? 8 // PEFT's defaults
  const alpha = c.lora_alpha ?? 8
  if (!isPositiveInt(r)) throw fail(id, `adapter_config.json: r is ${JSON.stringify(r)}, expected a positive integer`)
  if (!isAlpha(alpha)) {
    throw fail(id, `adapter_config.json: lora_alpha is ${JSON.stringify(alpha)}, expected > 0 and <= ${MAX_LORA_ALPHA}`)
  }
  return {
    r,
    alpha,
    useRslora: c.use_rslora === true,
    rankPattern: numberMap(id, 'rank_pattern', c.rank_pattern, isPositiveInt),
    alphaPattern: numberMap(id, 'alpha_pattern', c.alpha_pattern, isAlpha),
  }
}

const IN_NAMES: Record<LoraModule, string> = {
  q_proj: 'hidden_size',
  k_proj: 'hidden_size',
  v_proj: 'hidden_size',
  o_proj: 'num_heads·head_dim',
  gate_proj: 'hidden_size',
  up_proj: 'hidden_size',
  down_proj: 'intermediate_size',
}
const OUT_NAMES: Record<LoraModule, string> = {
  q_proj: 'num_heads·head_dim',
  k_proj: 'num_kv_heads·head_dim',
  v_proj: 'num_kv_heads·head_dim',
  o_proj: 'hidden_size',
  gate_proj: 'intermediate_size',
  up_proj: 'intermediate_size',
  down_proj: 'hidden_size',
}

const fmt = (shape: readonly number[]): string => `[${shape.join(', ')}]`

function firstNonFinite(values: Float32Array): number {
  for (let i = 0; i < values.length; i++) if (!Number.isFinite(values[i]!)) return i
  return -1
}

/**
 * Read the LoRA adapter in `dir` for the model `spec` describes. `id` names the adapter in errors
 * and becomes `LoraWeights.key`. Scales are resolved here: `alpha / r`, or `alpha / sqrt(r)` with
 * rsLoRA, with per-module `rank_pattern` / `alpha_pattern` overrides.
 */
export async function readLoraAdapter(dir: string, id: string, spec: ModelSpec): Promise<LoraWeights> {
  const config = await readPeftConfig(dir, id)
  return loraWeightsFrom(await readAdapterTensors(dir, id), config, id, spec)
}

/**
 * Open the adapter's weights: `adapter_model.safetensors` when it exists (it cannot carry code, and
 * PEFT writes it by default), else `adapter_model.bin` through the restricted torch reader.
 */
export async function readAdapterTensors(dir: string, id: string): Promise<AdapterTensors> {
  const stPath = join(dir, 'adapter_model.safetensors')
  if (existsSync(stPath)) {
    const st = await SafetensorsFile.read(stPath, id)
    return {
      file: 'adapter_model.safetensors',
      names: () => st.names(),
      shape: (name) => st.entry(name)?.shape,
      float32: (name) => st.float32(name),
    }
  }
  const binPath = join(dir, 'adapter_model.bin')
  if (existsSync(binPath)) {
    const bin = await TorchStateDict.read(binPath, id)
    return {
      file: 'adapter_model.bin',
      names: () => bin.names(),
      shape: (name) => bin.shape(name),
      float32: (name) => bin.float32(name),
    }
  }
  throw fail(id, 'adapter_model.safetensors is missing (and there is no adapter_model.bin)')
}

/** Check `file`'s tensors against the config and the model, and resolve them into `LoraWeights`. */
function loraWeightsFrom(file: AdapterTensors, config: PeftLoraConfig, id: string, spec: ModelSpec): LoraWeights {
  // Pair up A and B tensors per (layer, module).
  const pairs = new Map<string, { layer: number; module: LoraModule; a?: string; b?: string }>()
  for (const name of file.names()) {
    const m = KEY_RE.exec(name)
    if (m === null) {
      const hint = name.includes('lora_magnitude_vector')
        ? ' (a DoRA magnitude vector)'
        : name.includes('lora_embedding')
          ? ' (an embedding LoRA)'
          : ''
      throw fail(
        id,
        `unexpected tensor ${name}${hint}; only LoRA A/B weights of ${LORA_MODULES.join(', ')} are supported`,
      )
    }
    const layer = Number(m[1])
    const block = m[2]!
    const module = m[3]!
    if (!(LORA_MODULES as readonly string[]).includes(module)) {
      throw fail(id, `tensor ${name} adapts ${module}, which cannot be adapted; supported: ${LORA_MODULES.join(', ')}`)
    }
    if ((block === 'mlp') !== MLP_MODULES.includes(module))
      throw fail(id, `tensor ${name}: ${module} is not in ${block}`)
    if (layer >= spec.numLayers) {
      throw fail(id, `tensor ${name} targets layer ${layer}, but the model has ${spec.numLayers} layers`)
    }
    const key = `${layer}.${module}`
    const pair = pairs.get(key) ?? { layer, module: module as LoraModule }
    const side = m[4] === 'A' ? 'a' : 'b'
    if (pair[side] !== undefined) throw fail(id, `layer ${layer} ${module} has two lora_${m[4]} tensors`)
    pair[side] = name
    pairs.set(key, pair)
  }
  if (pairs.size === 0) throw fail(id, `${file.file} holds no LoRA weights`)

  const layers: Partial<Record<LoraModule, LoraModuleWeights>>[] = Array.from({ length: spec.numLayers }, () => ({}))
  const rankKeys = Object.keys(config.rankPattern)
  const alphaKeys = Object.keys(config.alphaPattern)
  for (const { layer, module, a, b } of pairs.values()) {
    const where = `layer ${layer} ${module}`
    if (a === undefined || b === undefined)
      throw fail(id, `${where} has lora_${a === undefined ? 'B' : 'A'} but no lora_${a === undefined ? 'A' : 'B'}`)
    const [outF, inF] = projectionShape(spec, module)
    const aShape = file.shape(a)!
    const bShape = file.shape(b)!
    if (aShape.length !== 2 || aShape[1] !== inF) {
      throw fail(id, `${where} lora_A has shape ${fmt(aShape)}, expected [rank, ${inF}] ([r, ${IN_NAMES[module]}])`)
    }
    const rank = aShape[0]!
    if (bShape.length !== 2 || bShape[0] !== outF || bShape[1] !== rank) {
      throw fail(
        id,
        `${where} lora_B has shape ${fmt(bShape)}, expected [${outF}, ${rank}] ([${OUT_NAMES[module]}, r])`,
      )
    }
    const moduleName = `model.layers.${layer}.${MLP_MODULES.includes(module) ? 'mlp' : 'self_attn'}.${module}`
    const rankKey = findPatternKey(rankKeys, moduleName)
    const r = rankKey === null ? config.r : config.rankPattern[rankKey]!
    if (rank !== r) {
      throw fail(
        id,
        `${where} has rank ${rank}, but adapter_config.json says r = ${r}${rankKey === null ? '' : ` (rank_pattern ${JSON.stringify(rankKey)})`}`,
      )
    }
    if (rank === 0 || rank > spec.maxLoraRank) {
      throw fail(id, `${where} has rank ${rank}; this server accepts ranks 1 to ${spec.maxLoraRank}`)
    }
    const alphaKey = findPatternKey(alphaKeys, moduleName)
    const alpha = alphaKey === null ? config.alpha : config.alphaPattern[alphaKey]!
    const values = { a: file.float32(a), b: file.float32(b) }
    for (const side of ['a', 'b'] as const) {
      const bad = firstNonFinite(values[side])
      if (bad >= 0)
        throw fail(
          id,
          `${where} lora_${side.toUpperCase()} holds a non-finite value (${values[side][bad]}) at index ${bad}`,
        )
    }
    layers[layer]![module] = {
      rank,
      scale: config.useRslora ? alpha / Math.sqrt(rank) : alpha / rank,
      a: values.a,
      b: values.b,
    }
  }
  return { kind: 'lora', key: id, layers }
}
