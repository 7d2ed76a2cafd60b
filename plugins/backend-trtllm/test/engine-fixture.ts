/**
 * Test fixtures: an engine directory's `config.json` in the shape `trtllm-build` writes it, for a
 * testkit model (the fake executor reads no engine; the backend reads this file for the model's
 * facts), and the core `ModelSpec` of a testkit model.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { ModelSpec } from '@loom/core'
import type { HfModelConfig } from '@loom/testkit'

/** Build-time choices of the fake engine. */
export interface EngineFixtureOptions {
  readonly dtype?: 'float16' | 'bfloat16' | 'float32'
  /** `plugin_config.lora_plugin`; null: built without LoRA. Default `auto`. */
  readonly loraPlugin?: string | null
  readonly maxLoraRank?: number
  /** TensorRT-LLM module names. Default the seven Llama projections. */
  readonly loraTargetModules?: readonly string[]
  readonly medusaHeads?: number
  readonly tpSize?: number
  readonly ppSize?: number
  readonly maxSeqLen?: number
}

export const ALL_TRTLLM_MODULES = [
  'attn_q',
  'attn_k',
  'attn_v',
  'attn_dense',
  'mlp_h_to_4h',
  'mlp_4h_to_h',
  'mlp_gate',
] as const

/** Write `<dir>/config.json` for `model` as a TensorRT-LLM engine would have it. */
export function writeEngineConfig(dir: string, model: HfModelConfig, opts: EngineFixtureOptions = {}): string {
  mkdirSync(dir, { recursive: true })
  const medusa = (opts.medusaHeads ?? 0) > 0
  const config = {
    version: '0.14.0',
    pretrained_config: {
      architecture: medusa ? 'MedusaForCausalLm' : 'LlamaForCausalLM',
      dtype: opts.dtype ?? 'float16',
      vocab_size: model.vocab_size,
      hidden_size: model.hidden_size,
      intermediate_size: model.intermediate_size,
      num_hidden_layers: model.num_hidden_layers,
      num_attention_heads: model.num_attention_heads,
      num_key_value_heads: model.num_key_value_heads,
      head_size: model.head_dim,
      max_position_embeddings: model.max_position_embeddings,
      mapping: {
        world_size: (opts.tpSize ?? 1) * (opts.ppSize ?? 1),
        tp_size: opts.tpSize ?? 1,
        pp_size: opts.ppSize ?? 1,
      },
      ...(medusa ? { num_medusa_heads: opts.medusaHeads, num_medusa_layers: 1 } : {}),
    },
    build_config: {
      max_input_len: 256,
      max_seq_len: opts.maxSeqLen ?? 512,
      max_batch_size: 8,
      max_num_tokens: 2048,
      plugin_config: { lora_plugin: opts.loraPlugin === undefined ? 'auto' : opts.loraPlugin },
      lora_config: {
        lora_dir: [],
        lora_ckpt_source: 'hf',
        max_lora_rank: opts.maxLoraRank ?? 64,
        lora_target_modules: [...(opts.loraTargetModules ?? ALL_TRTLLM_MODULES)],
      },
    },
  }
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2))
  return dir
}

/** The core's `ModelSpec` of a testkit model (what the LoRA reader checks against). */
export function specOf(model: HfModelConfig, maxLoraRank = 64): ModelSpec {
  return {
    architecture: 'LlamaForCausalLM',
    dtype: 'float16',
    device: 'cuda',
    vocabSize: model.vocab_size,
    hiddenSize: model.hidden_size,
    intermediateSize: model.intermediate_size,
    numLayers: model.num_hidden_layers,
    numHeads: model.num_attention_heads,
    numKvHeads: model.num_key_value_heads,
    headDim: model.head_dim,
    maxContextLength: model.max_position_embeddings,
    kvBlockSize: 0,
    kvBlockCount: 0,
    adapterSlots: 0,
    maxLoraRank,
  }
}
