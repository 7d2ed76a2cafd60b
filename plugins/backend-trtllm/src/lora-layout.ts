/**
 * PEFT LoRA → TensorRT-LLM's LoRA tensors, as its executor takes them in a `LoraConfig`
 * (docs/source/advanced/lora.md; runtime/loraUtils.cpp):
 *
 * - `weights` `[numModuleLayers, maxRow]` in the engine's dtype, CPU memory: row `i` is
 *   `flatten(A) ++ flatten(scale · B)` with `A` `[r, in]` and `B` `[out, r]` (PEFT's own shapes),
 *   zero-padded to the longest row. The scale (`alpha / r`, or `alpha / √r` for rsLoRA, with
 *   per-module patterns) is folded into B, as TensorRT-LLM's `hf_lora_convert.py` does: the engine
 *   applies `y += B (A x)` with no scale of its own.
 * - `config` int32 `[numModuleLayers, 3]`: row `i` is `(module id, layer, r)` for weights row `i`.
 *
 * Tensor parallelism needs nothing here: the request carries every rank's weights, unsplit, and
 * the runtime splits them (column-parallel modules split B, row-parallel ones A).
 */
import type { LoraModule, LoraWeights } from '@loom/core'
import { encodeFloats, type EngineDtype } from './half-float.ts'

/**
 * TensorRT-LLM's module id of each projection Loom adapts. The ids are `LoraModule::ModuleType`
 * in TensorRT-LLM's `cpp/include/tensorrt_llm/runtime/loraModule.h` (kATTN_Q = 1 … kMLP_GATE = 7);
 * the projection each one adapts is TensorRT-LLM's own Llama mapping,
 * `get_default_trtllm_modules_to_hf_modules()` in `tensorrt_llm/lora_manager.py` (also in
 * `lora_helper.py`): `mlp_h_to_4h` is `gate_proj`, `mlp_gate` is `up_proj` (sic), `mlp_4h_to_h` is
 * `down_proj`. Read from NVIDIA/TensorRT-LLM; no code of it is copied here.
 */
export const TRTLLM_LORA_MODULES: Readonly<Record<LoraModule, { readonly id: number; readonly name: string }>> = {
  q_proj: { id: 1, name: 'attn_q' },
  k_proj: { id: 2, name: 'attn_k' },
  v_proj: { id: 3, name: 'attn_v' },
  o_proj: { id: 4, name: 'attn_dense' },
  gate_proj: { id: 5, name: 'mlp_h_to_4h' },
  down_proj: { id: 6, name: 'mlp_4h_to_h' },
  up_proj: { id: 7, name: 'mlp_gate' },
}

/** Columns of a config row: module id, layer index, adapter size (rank). */
export const LORA_CONFIG_COLUMNS = 3

/** An adapter in TensorRT-LLM's layout, ready to go into a request. */
export interface TrtllmLoraTensors {
  /** `[rows, maxRow]` row-major: f16/bf16 bits (`Uint16Array`) or f32 values, as `dtype` says. */
  readonly weights: Float32Array | Uint16Array
  readonly weightsShape: readonly [rows: number, maxRow: number]
  readonly dtype: EngineDtype
  /** `[rows, 3]` row-major int32: `(module id, layer, rank)`. */
  readonly config: Int32Array
  readonly configShape: readonly [rows: number, columns: typeof LORA_CONFIG_COLUMNS]
  /** Bytes the two tensors occupy (what one copy of the adapter costs in TensorRT-LLM's host cache). */
  readonly byteLength: number
}

/**
 * Lay out `lora` (read and checked by the core, scales resolved) for a TensorRT-LLM engine of
 * `dtype`. Rows go layer by layer, modules in id order within a layer, as the executor's own
 * examples order them; the order carries no meaning since every row names its module and layer.
 */
export function toTrtllmLora(lora: LoraWeights, dtype: EngineDtype): TrtllmLoraTensors {
  const rows: { moduleId: number; layer: number; rank: number; a: Float32Array; b: Float32Array; scale: number }[] = []
  lora.layers.forEach((modules, layer) => {
    for (const [module, w] of Object.entries(modules) as [LoraModule, (typeof modules)[LoraModule]][]) {
      if (w === undefined) continue
      rows.push({ moduleId: TRTLLM_LORA_MODULES[module].id, layer, rank: w.rank, a: w.a, b: w.b, scale: w.scale })
    }
  })
  if (rows.length === 0) throw new RangeError(`adapter ${lora.key} has no LoRA modules`)
  rows.sort((x, y) => x.layer - y.layer || x.moduleId - y.moduleId)
  const maxRow = Math.max(...rows.map((row) => row.a.length + row.b.length))
  const values = new Float32Array(rows.length * maxRow) // zero padding comes free
  const config = new Int32Array(rows.length * LORA_CONFIG_COLUMNS)
  rows.forEach((row, i) => {
    const base = i * maxRow
    values.set(row.a, base)
    const bBase = base + row.a.length
    for (let j = 0; j < row.b.length; j++) values[bBase + j] = row.b[j]! * row.scale
    config.set([row.moduleId, row.layer, row.rank], i * LORA_CONFIG_COLUMNS)
  })
  const weights = encodeFloats(values, dtype)
  return {
    weights,
    weightsShape: [rows.length, maxRow],
    dtype,
    config,
    configShape: [rows.length, LORA_CONFIG_COLUMNS],
    byteLength: weights.byteLength + config.byteLength,
  }
}
