/**
 * Merges parsed LoRA adapters module by module into one `LoraWeights` (scale folded into the
 * factors, so every merged module has `scale` 1). See ./README.md for why each strategy works in
 * the space it does:
 *
 * - `linear` is exact in factor space: `Σ_i w_i s_i B_i A_i = [B_1 … B_n] · [w_1 s_1 A_1; …; w_n s_n A_n]`,
 *   so the factors are concatenated along the rank (rank `Σ r_i`);
 * - `ties`, `dare_linear`, `dare_ties` act entry-wise on the dense updates `ΔW_i = s_i B_i A_i`;
 *   their result is not low-rank in general, so it is re-factored by a truncated SVD.
 *
 * Either way the merged rank of a module is at most `min(Σ r_i, maxRank)`; when that budget is
 * smaller than the update's rank, the SVD keeps the best approximation of that rank (Eckart–Young)
 * and the relative error is reported.
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises'
import { LORA_MODULES, type LoraModule, type LoraModuleWeights, type LoraWeights } from '../../contracts/step-runner.ts'
import type { MergedAdaptersRequest } from './merge-params.ts'
import { seededUniform } from './seeded-random.ts'
import { mergeTaskTensors } from './task-arithmetic.ts'
import { lowRankFactors } from './truncated-svd.ts'

/** How a merge went, for logs and the cache's metadata. */
export interface MergeReport {
  /** Modules merged (layer × projection pairs touched by at least one input). */
  readonly modules: number
  /** Largest rank of a merged module. */
  readonly maxRank: number
  /** Largest `‖ΔW − B·A‖_F / ‖ΔW‖_F` over modules re-factored by SVD (0 when all were exact). */
  readonly maxRelativeError: number
}

export interface MergeLoraOptions {
  /** Largest rank a merged module may have (the runtime's `max_lora_rank`). */
  readonly maxRank: number
  /** `[outFeatures, inFeatures]` of a projection. */
  readonly shape: (module: LoraModule) => readonly [number, number]
}

/** The uniform stream of DARE's drop mask for one input's update of one module. */
export function dareUniform(seed: number, input: number, layer: number, module: LoraModule): () => number {
  return seededUniform(seed, 'dare', input, layer, module)
}

/** `s · B · A` as a dense row-major `[rows, cols]` f32 matrix. */
export function denseUpdate(w: LoraModuleWeights, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols)
  const acc = new Float64Array(cols)
  const a = w.a
  for (let r = 0; r < rows; r++) {
    acc.fill(0)
    const coefs = w.b.subarray(r * w.rank, (r + 1) * w.rank)
    // Four rank terms per pass over the row: a quarter of the accumulator reads and writes.
    let k = 0
    for (; k + 4 <= w.rank; k += 4) {
      const c0 = w.scale * coefs[k]!
      const c1 = w.scale * coefs[k + 1]!
      const c2 = w.scale * coefs[k + 2]!
      const c3 = w.scale * coefs[k + 3]!
      if (c0 === 0 && c1 === 0 && c2 === 0 && c3 === 0) continue
      const b0 = k * cols
      for (let c = 0; c < cols; c++) {
        acc[c]! += c0 * a[b0 + c]! + c1 * a[b0 + cols + c]! + c2 * a[b0 + 2 * cols + c]! + c3 * a[b0 + 3 * cols + c]!
      }
    }
    for (; k < w.rank; k++) {
      const coef = w.scale * coefs[k]!
      if (coef === 0) continue
      const base = k * cols
      for (let c = 0; c < cols; c++) acc[c]! += coef * a[base + c]!
    }
    out.set(acc, r * cols)
  }
  return out
}

/** Concatenate ranks: `A' = [w_i s_i A_i]` (stacked rows), `B' = [B_i]` (side by side columns). */
function concatenate(
  parts: readonly { w: LoraModuleWeights; weight: number }[],
  rows: number,
  cols: number,
): LoraModuleWeights {
  const rank = parts.reduce((sum, p) => sum + p.w.rank, 0)
  const a = new Float32Array(rank * cols)
  const b = new Float32Array(rows * rank)
  let offset = 0
  for (const { w, weight } of parts) {
    const coef = weight * w.scale
    for (let k = 0; k < w.rank; k++) {
      for (let c = 0; c < cols; c++) a[(offset + k) * cols + c] = coef * w.a[k * cols + c]!
      for (let r = 0; r < rows; r++) b[r * rank + offset + k] = w.b[r * w.rank + k]!
    }
    offset += w.rank
  }
  return { rank, scale: 1, a, b }
}

function frobenius(m: ArrayLike<number>): number {
  let sum = 0
  for (let i = 0; i < m.length; i++) sum += m[i]! * m[i]!
  return Math.sqrt(sum)
}

/** `‖M − B·A‖_F / ‖M‖_F`. */
function relativeError(m: Float32Array, f: LoraModuleWeights, rows: number, cols: number): number {
  const norm = frobenius(m)
  if (norm === 0) return 0
  const approx = denseUpdate(f, rows, cols)
  let sum = 0
  for (let i = 0; i < m.length; i++) sum += (m[i]! - approx[i]!) ** 2
  return Math.sqrt(sum) / norm
}

/**
 * Merge `inputs` (parsed for the same model, `inputs[i]` weighted by `request.weights[i]`) into
 * one adapter keyed `key`. Slow for large adapters: the server runs it on a worker thread
 * (merge-in-worker.ts). It still yields between modules, for callers on an event loop.
 */
export async function mergeLoraWeights(
  inputs: readonly LoraWeights[],
  request: Pick<MergedAdaptersRequest, 'weights' | 'strategy' | 'density' | 'majoritySignMethod' | 'seed'>,
  key: string,
  options: MergeLoraOptions,
): Promise<{ weights: LoraWeights; report: MergeReport }> {
  const numLayers = Math.max(0, ...inputs.map((w) => w.layers.length))
  const layers: Partial<Record<LoraModule, LoraModuleWeights>>[] = []
  let modules = 0
  let maxRank = 0
  let maxRelativeError = 0
  for (let layer = 0; layer < numLayers; layer++) {
    const merged: Partial<Record<LoraModule, LoraModuleWeights>> = {}
    for (const module of LORA_MODULES) {
      const parts: { w: LoraModuleWeights; weight: number; input: number }[] = []
      inputs.forEach((input, i) => {
        const w = input.layers[layer]?.[module]
        if (w) parts.push({ w, weight: request.weights[i]!, input: i })
      })
      if (parts.length === 0) continue
      const [rows, cols] = options.shape(module)
      const rankSum = parts.reduce((sum, p) => sum + p.w.rank, 0)
      let result: LoraModuleWeights | null
      if (request.strategy === 'linear' && rankSum <= options.maxRank) {
        result = concatenate(parts, rows, cols)
      } else {
        const dense = mergeTaskTensors(
          parts.map((p) => denseUpdate(p.w, rows, cols)),
          parts.map((p) => p.weight),
          {
            strategy: request.strategy,
            density: request.density,
            majoritySignMethod: request.majoritySignMethod,
            // One stream per (seed, input, layer, module): masks do not depend on processing order.
            uniformFor: (j) => dareUniform(request.seed, parts[j]!.input, layer, module),
          },
        )
        const f = lowRankFactors(dense, rows, cols, { maxRank: Math.min(rankSum, options.maxRank), seed: request.seed })
        result = f.rank === 0 ? null : { rank: f.rank, scale: 1, a: f.a, b: f.b }
        if (result) maxRelativeError = Math.max(maxRelativeError, relativeError(dense, result, rows, cols))
        await yieldToLoop()
      }
      // Every entry pruned away (or the inputs cancel out): the module is left unadapted.
      if (result === null) continue
      merged[module] = result
      modules++
      maxRank = Math.max(maxRank, result.rank)
    }
    layers.push(merged)
  }
  return { weights: { kind: 'lora', key, layers }, report: { modules, maxRank, maxRelativeError } }
}
