/**
 * Bytes a batch-1 decode step must read from memory: the roofline's numerator. Every projection
 * weight once (in its stored dtype), the LM head once (tied: the embedding matrix; the embedding
 * lookup itself reads one row), the f32 norms, the K and V history of the row, and for a LoRA row
 * its adapter's A and B of every layer (stored in the model's dtype).
 */
import type { ModelSpec } from '@loom/core'

export function decodeStepBytes(spec: ModelSpec, dtypeBytes: number, contextLen: number, loraRank: number): number {
  const H = spec.hiddenSize
  const I = spec.intermediateSize
  const QD = spec.numHeads * spec.headDim
  const KD = spec.numKvHeads * spec.headDim
  const L = spec.numLayers
  const perLayerWeights = QD * H + 2 * KD * H + H * QD + 3 * I * H
  const weights = (L * perLayerWeights + spec.vocabSize * H + H) * dtypeBytes
  const norms = (2 * L + 1) * H * 4
  const kv = 2 * L * KD * contextLen * 4
  return weights + norms + kv + loraAdapterBytes(spec, dtypeBytes, loraRank)
}

/** Bytes of one adapter of rank `loraRank` on all 7 projections, stored at `dtypeBytes` per weight. */
export function loraAdapterBytes(spec: ModelSpec, dtypeBytes: number, loraRank: number): number {
  const H = spec.hiddenSize
  const QD = spec.numHeads * spec.headDim
  const KD = spec.numKvHeads * spec.headDim
  // A [r, in] + B [out, r] for q, k, v, o, gate, up, down.
  const loraIn = 5 * H + QD + spec.intermediateSize
  const loraOut = QD + 2 * KD + H + 2 * spec.intermediateSize + H
  return spec.numLayers * loraRank * (loraIn + loraOut) * dtypeBytes
}
