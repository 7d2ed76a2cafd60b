/** The weight shapes of a Llama-family model's projections, from its `ModelSpec`. */
import type { LoraModule, ModelSpec } from '../contracts/step-runner.ts'

/** `[outFeatures, inFeatures]` of a projection in the model described by `spec`. */
export function projectionShape(spec: ModelSpec, module: LoraModule): readonly [number, number] {
  const q = spec.numHeads * spec.headDim
  const kv = spec.numKvHeads * spec.headDim
  switch (module) {
    case 'q_proj':
      return [q, spec.hiddenSize]
    case 'k_proj':
    case 'v_proj':
      return [kv, spec.hiddenSize]
    case 'o_proj':
      return [spec.hiddenSize, q]
    case 'gate_proj':
    case 'up_proj':
      return [spec.intermediateSize, spec.hiddenSize]
    case 'down_proj':
      return [spec.hiddenSize, spec.intermediateSize]
  }
}
