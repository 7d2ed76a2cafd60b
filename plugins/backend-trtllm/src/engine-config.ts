/**
 * Reads what the backend must know about a built engine from its `config.json`, as `trtllm-build`
 * writes it (`{ version, pretrained_config, build_config }`): the model's shape, the dtype LoRA
 * weights must have, the LoRA plugin's rank limit and target modules, Medusa heads, the parallel
 * mapping and the sequence limit. Every problem is a `model_invalid` naming the file and the field.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { LORA_MODULES, LoomError, type LoraModule, type ModelSpec } from '@loom/core'
import type { EngineDtype } from './half-float.ts'
import { TRTLLM_LORA_MODULES } from './lora-layout.ts'

/** The engine facts the backend uses: the model's shape (as the core's `ModelSpec` names it) and the build's. */
export interface EngineFacts extends Pick<
  ModelSpec,
  'architecture' | 'vocabSize' | 'hiddenSize' | 'intermediateSize' | 'numLayers' | 'numHeads' | 'numKvHeads' | 'headDim'
> {
  /** The dtype LoRA weights are sent in: the LoRA plugin's, or the model's when it says `auto`. */
  readonly dtype: EngineDtype
  /** Longest prompt + output (`build_config.max_seq_len`). */
  readonly maxSeqLen: number
  /** 0 when the engine was built without the LoRA plugin. */
  readonly maxLoraRank: number
  /** Loom's names of the projections the engine's LoRA plugin adapts (`q_proj`, …). */
  readonly loraTargetModules: readonly LoraModule[]
  /** 0 without Medusa heads. */
  readonly medusaHeads: number
  readonly tensorParallel: number
  readonly pipelineParallel: number
}

const DTYPES: readonly EngineDtype[] = ['float16', 'bfloat16', 'float32']

/** Read and check `<engineDir>/config.json`. */
export async function readEngineConfig(engineDir: string): Promise<EngineFacts> {
  const file = join(engineDir, 'config.json')
  const invalid = (detail: string): LoomError => new LoomError('model_invalid', { path: engineDir, detail })
  if (!existsSync(file)) {
    throw invalid('config.json is missing: `engine_dir` must be the output directory of `trtllm-build`')
  }
  let raw: unknown
  try {
    raw = JSON.parse(await readFile(file, 'utf8'))
  } catch (err) {
    throw invalid(`config.json is not valid JSON (${err instanceof Error ? err.message : String(err)})`)
  }
  const root = object(raw, 'config.json', invalid)
  const pretrained = object(root.pretrained_config, 'pretrained_config', invalid)
  const build = object(root.build_config, 'build_config', invalid)
  const count = (section: Record<string, unknown>, name: string, field: string): number => {
    const value = section[field]
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
      throw invalid(`config.json: ${name}.${field} is ${JSON.stringify(value)}; expected a positive integer`)
    }
    return value
  }
  const modelDtype = pretrained.dtype
  if (!(DTYPES as readonly unknown[]).includes(modelDtype)) {
    throw invalid(
      `config.json: pretrained_config.dtype is ${JSON.stringify(modelDtype)}; expected ${DTYPES.join(', ')}`,
    )
  }
  const numHeads = count(pretrained, 'pretrained_config', 'num_attention_heads')
  const hiddenSize = count(pretrained, 'pretrained_config', 'hidden_size')
  const mapping =
    pretrained.mapping === undefined ? {} : object(pretrained.mapping, 'pretrained_config.mapping', invalid)
  const plugins =
    build.plugin_config === undefined ? {} : object(build.plugin_config, 'build_config.plugin_config', invalid)
  const lora = loraFacts(build, plugins, modelDtype as EngineDtype, invalid)
  const medusaHeads = pretrained.num_medusa_heads
  return {
    architecture: typeof pretrained.architecture === 'string' ? pretrained.architecture : 'unknown',
    dtype: lora.dtype,
    vocabSize: count(pretrained, 'pretrained_config', 'vocab_size'),
    hiddenSize,
    intermediateSize: count(pretrained, 'pretrained_config', 'intermediate_size'),
    numLayers: count(pretrained, 'pretrained_config', 'num_hidden_layers'),
    numHeads,
    numKvHeads:
      pretrained.num_key_value_heads === undefined
        ? numHeads
        : count(pretrained, 'pretrained_config', 'num_key_value_heads'),
    // TensorRT-LLM calls it head_size; absent, it is hidden / heads.
    headDim:
      pretrained.head_size === undefined ? hiddenSize / numHeads : count(pretrained, 'pretrained_config', 'head_size'),
    maxSeqLen: count(build, 'build_config', 'max_seq_len'),
    maxLoraRank: lora.maxRank,
    loraTargetModules: lora.modules,
    medusaHeads: typeof medusaHeads === 'number' && Number.isInteger(medusaHeads) && medusaHeads > 0 ? medusaHeads : 0,
    tensorParallel: mapping.tp_size === undefined ? 1 : count(mapping, 'pretrained_config.mapping', 'tp_size'),
    pipelineParallel: mapping.pp_size === undefined ? 1 : count(mapping, 'pretrained_config.mapping', 'pp_size'),
  }
}

/** LoRA plugin facts: enabled when `plugin_config.lora_plugin` names a dtype (or `auto`). */
function loraFacts(
  build: Record<string, unknown>,
  plugins: Record<string, unknown>,
  modelDtype: EngineDtype,
  invalid: (detail: string) => LoomError,
): { dtype: EngineDtype; maxRank: number; modules: LoraModule[] } {
  const plugin = plugins.lora_plugin
  if (plugin === undefined || plugin === null || plugin === false) return { dtype: modelDtype, maxRank: 0, modules: [] }
  const dtype = plugin === 'auto' ? modelDtype : plugin
  if (!(DTYPES as readonly unknown[]).includes(dtype)) {
    throw invalid(`config.json: build_config.plugin_config.lora_plugin is ${JSON.stringify(plugin)}`)
  }
  const config = build.lora_config === undefined ? {} : object(build.lora_config, 'build_config.lora_config', invalid)
  // trtllm-build's default rank limit is 64.
  const maxRank = config.max_lora_rank ?? 64
  if (typeof maxRank !== 'number' || !Number.isInteger(maxRank) || maxRank < 1) {
    throw invalid(`config.json: build_config.lora_config.max_lora_rank is ${JSON.stringify(maxRank)}`)
  }
  const targets = config.lora_target_modules
  if (!Array.isArray(targets) || targets.length === 0) {
    throw invalid('config.json: the LoRA plugin is on but build_config.lora_config.lora_target_modules is empty')
  }
  const byTrtllmName = new Map(LORA_MODULES.map((m) => [TRTLLM_LORA_MODULES[m].name, m]))
  const modules: LoraModule[] = []
  for (const name of targets) {
    const module = byTrtllmName.get(String(name))
    // Other TensorRT-LLM modules (attn_qkv, MoE, cross attention) have no PEFT counterpart Loom reads.
    if (module !== undefined) modules.push(module)
  }
  return { dtype: dtype as EngineDtype, maxRank, modules: LORA_MODULES.filter((m) => modules.includes(m)) }
}

function object(value: unknown, name: string, invalid: (detail: string) => LoomError): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalid(`config.json: ${name} is missing or not an object`)
  }
  return value as Record<string, unknown>
}
