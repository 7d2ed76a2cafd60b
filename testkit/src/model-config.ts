/**
 * The `config.json` shape of the Llama-family models the test kit builds, and the projection
 * shapes derived from it.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

export type ModelArch = 'llama' | 'mistral' | 'qwen2'
export type ModelDtype = 'float32' | 'float16' | 'bfloat16'

/** Llama 3.1 style frequency-dependent RoPE scaling, or plain linear position interpolation. */
export type RopeScaling =
  | {
      readonly rope_type: 'llama3'
      readonly factor: number
      readonly low_freq_factor: number
      readonly high_freq_factor: number
      readonly original_max_position_embeddings: number
    }
  | { readonly rope_type: 'linear'; readonly factor: number }

/** The fields of a Hugging Face `config.json` the test kit writes and reads. */
export interface HfModelConfig {
  readonly architectures: readonly string[]
  readonly model_type: ModelArch
  readonly hidden_size: number
  readonly intermediate_size: number
  readonly num_hidden_layers: number
  readonly num_attention_heads: number
  readonly num_key_value_heads: number
  readonly head_dim: number
  readonly vocab_size: number
  readonly max_position_embeddings: number
  readonly rms_norm_eps: number
  readonly rope_theta: number
  readonly rope_scaling: RopeScaling | null
  readonly tie_word_embeddings: boolean
  readonly torch_dtype: ModelDtype
  readonly bos_token_id: number
  readonly eos_token_id: number
  readonly hidden_act: 'silu'
  readonly [extra: string]: unknown
}

/** The projections a LoRA adapter may target (same order as `@loom/core`'s `LORA_MODULES`). */
export const PROJECTIONS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const
export type Projection = (typeof PROJECTIONS)[number]

/** `[outFeatures, inFeatures]` of a projection's weight. */
export function projectionShape(config: HfModelConfig, module: Projection): [number, number] {
  const h = config.hidden_size
  const q = config.num_attention_heads * config.head_dim
  const kv = config.num_key_value_heads * config.head_dim
  const i = config.intermediate_size
  switch (module) {
    case 'q_proj':
      return [q, h]
    case 'k_proj':
    case 'v_proj':
      return [kv, h]
    case 'o_proj':
      return [h, q]
    case 'gate_proj':
    case 'up_proj':
      return [i, h]
    case 'down_proj':
      return [h, i]
  }
}

/** Read `config.json` from a model folder, filling `head_dim` when the file leaves it out. */
export function readModelConfig(dir: string): HfModelConfig {
  const raw = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>
  const heads = raw.num_attention_heads as number
  return {
    ...raw,
    num_key_value_heads: (raw.num_key_value_heads as number | undefined) ?? heads,
    head_dim: (raw.head_dim as number | undefined) ?? (raw.hidden_size as number) / heads,
    rope_theta: (raw.rope_theta as number | undefined) ?? 10000,
    rope_scaling: (raw.rope_scaling as RopeScaling | null | undefined) ?? null,
    tie_word_embeddings: (raw.tie_word_embeddings as boolean | undefined) ?? false,
  } as HfModelConfig
}
