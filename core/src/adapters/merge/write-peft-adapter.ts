/**
 * Writes merged `LoraWeights` as an ordinary PEFT LoRA adapter (`adapter_config.json` +
 * `adapter_model.safetensors`, f32), so the normal reader loads it like any other adapter. Ranks
 * differ per module after a merge: each module gets an exact `rank_pattern` / `alpha_pattern` entry
 * with `alpha = rank`, so its scale is 1 (the merge already folded the scales into the factors).
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { LoraModule, LoraWeights } from '../../contracts/step-runner.ts'

const MLP_MODULES: readonly string[] = ['gate_proj', 'up_proj', 'down_proj']

/** `model.layers.3.self_attn.q_proj`: PEFT's module name, the key of its patterns. */
function moduleName(layer: number, module: LoraModule): string {
  return `model.layers.${layer}.${MLP_MODULES.includes(module) ? 'mlp' : 'self_attn'}.${module}`
}

/** Serialise f32 tensors (in insertion order) to safetensors bytes. */
export function encodeF32Safetensors(
  tensors: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>,
): Buffer {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } }
  let offset = 0
  for (const [name, t] of tensors) {
    header[name] = { dtype: 'F32', shape: [...t.shape], data_offsets: [offset, offset + t.data.byteLength] }
    offset += t.data.byteLength
  }
  let json = JSON.stringify(header)
  // The data section starts 8-byte aligned; the format allows trailing spaces in the header.
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8)
  const headerBytes = Buffer.from(json, 'utf8')
  const length = Buffer.alloc(8)
  length.writeBigUInt64LE(BigInt(headerBytes.length))
  const parts: Buffer[] = [length, headerBytes]
  for (const t of tensors.values()) {
    const bytes = Buffer.alloc(t.data.byteLength)
    for (let i = 0; i < t.data.length; i++) bytes.writeFloatLE(t.data[i]!, i * 4)
    parts.push(bytes)
  }
  return Buffer.concat(parts)
}

/** Write `weights` into `dir` (which must exist) as a PEFT LoRA adapter; `extra` goes into the config. */
export async function writePeftAdapter(
  dir: string,
  weights: LoraWeights,
  extra: Readonly<Record<string, unknown>> = {},
): Promise<void> {
  const tensors = new Map<string, { shape: readonly number[]; data: Float32Array }>()
  const rankPattern: Record<string, number> = {}
  const targets = new Set<LoraModule>()
  let maxRank = 0
  weights.layers.forEach((modules, layer) => {
    for (const [module, w] of Object.entries(modules) as [LoraModule, (typeof modules)[LoraModule]][]) {
      if (!w) continue
      const name = moduleName(layer, module)
      const inFeatures = w.a.length / w.rank
      const outFeatures = w.b.length / w.rank
      // Scales other than 1 are folded into B, which keeps alpha = rank valid for every module.
      const b = w.scale === 1 ? w.b : w.b.map((x) => x * w.scale)
      tensors.set(`base_model.model.${name}.lora_A.weight`, { shape: [w.rank, inFeatures], data: w.a })
      tensors.set(`base_model.model.${name}.lora_B.weight`, { shape: [outFeatures, w.rank], data: b })
      rankPattern[name] = w.rank
      targets.add(module)
      maxRank = Math.max(maxRank, w.rank)
    }
  })
  const config = {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    r: maxRank,
    lora_alpha: maxRank,
    lora_dropout: 0,
    bias: 'none',
    fan_in_fan_out: false,
    use_rslora: false,
    use_dora: false,
    target_modules: [...targets],
    rank_pattern: rankPattern,
    alpha_pattern: rankPattern,
    ...extra,
  }
  await writeFile(join(dir, 'adapter_config.json'), JSON.stringify(config, null, 2))
  await writeFile(join(dir, 'adapter_model.safetensors'), encodeF32Safetensors(tensors))
}
