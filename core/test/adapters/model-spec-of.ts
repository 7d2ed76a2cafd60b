import type { HfModelConfig } from '@loom/testkit'
import type { ModelSpec } from '../../src/contracts/step-runner.ts'

/** The `ModelSpec` a runner would report for a testkit model config (adapter readers validate against it). */
export function specOf(c: HfModelConfig, overrides: Partial<ModelSpec> = {}): ModelSpec {
  return {
    architecture: c.architectures[0]!,
    dtype: c.torch_dtype,
    device: 'cpu',
    vocabSize: c.vocab_size,
    hiddenSize: c.hidden_size,
    intermediateSize: c.intermediate_size,
    numLayers: c.num_hidden_layers,
    numHeads: c.num_attention_heads,
    numKvHeads: c.num_key_value_heads,
    headDim: c.head_dim,
    maxContextLength: c.max_position_embeddings,
    kvBlockSize: 16,
    kvBlockCount: 64,
    adapterSlots: 4,
    maxLoraRank: 64,
    ...overrides,
  }
}
