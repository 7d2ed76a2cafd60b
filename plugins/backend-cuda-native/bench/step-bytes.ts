/**
 * Bytes a batch-1 decode step must read from memory: the roofline's numerator. Every projection
 * weight once (in its stored dtype), the LM head once (tied: the embedding matrix; the embedding
 * lookup itself reads one row), the f32 norms, the K and V history of the row, and for a LoRA row
 * its adapter's A and B of every layer (stored in the model's dtype).
 *
 * `dtypeBytes` is bytes per projection and LM-head weight: 4 (f32), 2 (f16/bf16), or
 * INT8_WEIGHT_BYTES for `weights: int8`; `adapterBytes` the adapters' (the stored dtype's, which
 * int8 models keep), default `dtypeBytes`.
 */
import type { ModelSpec } from '@loom/core'

/** Bytes per weight of `weights: int8`: 32 int8 values and one f16 scale per block (Q8_0's 34/32). */
export const INT8_WEIGHT_BYTES = 34 / 32

export function decodeStepBytes(
  spec: ModelSpec,
  dtypeBytes: number,
  contextLen: number,
  loraRank: number,
  adapterBytes = dtypeBytes,
): number {
  const H = spec.hiddenSize
  const I = spec.intermediateSize
  const QD = spec.numHeads * spec.headDim
  const KD = spec.numKvHeads * spec.headDim
  const L = spec.numLayers
  const perLayerWeights = QD * H + 2 * KD * H + H * QD + 3 * I * H
  const weights = (L * perLayerWeights + spec.vocabSize * H + H) * dtypeBytes
  const norms = (2 * L + 1) * H * 4
  const kv = 2 * L * KD * contextLen * 4
  return weights + norms + kv + loraAdapterBytes(spec, adapterBytes, loraRank)
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
