/**
 * Reads and checks a Hugging Face `config.json` for the architectures the native runtime serves
 * (Llama, Mistral, Qwen2). Anything it cannot serve is a `model_invalid` error naming the field.
 */
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { LoomError } from '@loom/core'
import type { NativeModelConfig } from './load-native.ts'

/** The architectures (config `architectures[0]`) the graph implements. */
export const SUPPORTED_ARCHITECTURES = ['LlamaForCausalLM', 'MistralForCausalLM', 'Qwen2ForCausalLM'] as const

export interface ParsedModelConfig extends NativeModelConfig {
  readonly architecture: string
}

type Json = Record<string, unknown>

function fail(dir: string, detail: string): LoomError {
  return new LoomError('model_invalid', { path: dir, detail })
}

function positiveInt(dir: string, cfg: Json, key: string, fallback?: number): number {
  const value = cfg[key] ?? fallback
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    throw fail(dir, `config.json \`${key}\` must be a positive integer; found ${JSON.stringify(value)}`)
  return value
}

function positiveNumber(dir: string, cfg: Json, key: string, fallback: number): number {
  const value = cfg[key] ?? fallback
  if (typeof value !== 'number' || !(value > 0))
    throw fail(dir, `config.json \`${key}\` must be a positive number; found ${JSON.stringify(value)}`)
  return value
}

/** Parse `<dir>/config.json`. */
export function readModelConfig(dir: string): ParsedModelConfig {
  let cfg: Json
  try {
    cfg = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8')) as Json
  } catch (err) {
    throw fail(dir, `config.json cannot be read: ${(err as Error).message}`)
  }
  const archs = cfg.architectures
  const architecture = Array.isArray(archs) && typeof archs[0] === 'string' ? archs[0] : String(cfg.model_type)
  if (!(SUPPORTED_ARCHITECTURES as readonly string[]).includes(architecture))
    throw fail(
      dir,
      `architecture ${architecture} is not supported by the native runtime (supported: ${SUPPORTED_ARCHITECTURES.join(', ')})`,
    )
  if (cfg.hidden_act !== undefined && cfg.hidden_act !== 'silu')
    throw fail(dir, `hidden_act ${JSON.stringify(cfg.hidden_act)} is not supported (only silu)`)
  if (cfg.mlp_bias === true) throw fail(dir, 'mlp_bias: true is not supported')

  const hiddenSize = positiveInt(dir, cfg, 'hidden_size')
  const numHeads = positiveInt(dir, cfg, 'num_attention_heads')
  const numKvHeads = positiveInt(dir, cfg, 'num_key_value_heads', numHeads)
  if (numHeads % numKvHeads !== 0)
    throw fail(dir, `num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`)
  const headDim = positiveInt(dir, cfg, 'head_dim', Math.floor(hiddenSize / numHeads))
  if (headDim % 2 !== 0) throw fail(dir, `head_dim ${headDim} must be even for RoPE`)

  // RoPE scaling: none/default, linear, or Llama 3's frequency-dependent scheme.
  let ropeScaling = 0
  let ropeFactor = 1
  let ropeLowFreqFactor = 1
  let ropeHighFreqFactor = 4
  let ropeOriginalMaxPositions = 8192
  const rs = cfg.rope_scaling as Json | null | undefined
  if (rs != null) {
    const type = rs.rope_type ?? rs.type
    if (type === 'llama3') {
      ropeScaling = 2
      ropeFactor = positiveNumber(dir, rs, 'factor', 8)
      ropeLowFreqFactor = positiveNumber(dir, rs, 'low_freq_factor', 1)
      ropeHighFreqFactor = positiveNumber(dir, rs, 'high_freq_factor', 4)
      ropeOriginalMaxPositions = positiveNumber(dir, rs, 'original_max_position_embeddings', 8192)
      if (ropeHighFreqFactor === ropeLowFreqFactor)
        throw fail(dir, 'rope_scaling high_freq_factor must differ from low_freq_factor')
    } else if (type === 'linear') {
      ropeScaling = 1
      ropeFactor = positiveNumber(dir, rs, 'factor', 1)
    } else if (type !== 'default') {
      throw fail(dir, `rope_scaling type ${JSON.stringify(type)} is not supported (llama3, linear, default)`)
    }
  }
  return {
    architecture,
    vocabSize: positiveInt(dir, cfg, 'vocab_size'),
    hiddenSize,
    intermediateSize: positiveInt(dir, cfg, 'intermediate_size'),
    numLayers: positiveInt(dir, cfg, 'num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    maxPositions: positiveInt(dir, cfg, 'max_position_embeddings', 4096),
    rmsNormEps: positiveNumber(dir, cfg, 'rms_norm_eps', 1e-6),
    ropeTheta: positiveNumber(dir, cfg, 'rope_theta', 10000),
    ropeScaling,
    ropeFactor,
    ropeLowFreqFactor,
    ropeHighFreqFactor,
    ropeOriginalMaxPositions,
    tieWordEmbeddings: cfg.tie_word_embeddings === true,
    attentionBias: architecture === 'Qwen2ForCausalLM' || cfg.attention_bias === true,
  }
}
