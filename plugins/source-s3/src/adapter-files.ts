/**
 * Which objects under an adapter's prefix the runtime needs. Everything else in the folder
 * (checkpoints, training logs, README) is left in the bucket.
 */

/** Files that mark a folder as an adapter: LoRA (`adapter_config.json`) or Medusa (`config.json`). */
export const CONFIG_FILES = ['adapter_config.json', 'config.json'] as const

/** Weight files, most preferred first; only the first one present is fetched. */
export const LORA_WEIGHTS = ['adapter_model.safetensors', 'adapter_model.bin'] as const
export const MEDUSA_WEIGHTS = ['medusa_lm_head.safetensors', 'model.safetensors', 'medusa_lm_head.bin'] as const

/** Optional files fetched when present: the adapter's own tokenizer. */
export const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json'] as const

export interface ListedObject {
  /** Name relative to the adapter prefix (`adapter_model.safetensors`). */
  readonly name: string
  readonly size: number
  readonly etag: string
}

/** The outcome of picking: the files to fetch, or why the folder is not an adapter. */
export type Picked = { readonly files: ListedObject[] } | { readonly problem: string }

/**
 * Pick the adapter files among the objects directly under a prefix. A LoRA needs its config and
 * one weights file (safetensors preferred over `.bin`); a Medusa head needs `config.json` and its
 * weights. A folder with both configs is a Medusa head with a LoRA, and both weights are fetched.
 */
export function pickAdapterFiles(objects: readonly ListedObject[]): Picked {
  const byName = new Map(objects.map((o) => [o.name, o]))
  const first = (names: readonly string[]) => names.map((n) => byName.get(n)).find((o) => o !== undefined)
  const picked: ListedObject[] = []
  const loraConfig = byName.get('adapter_config.json')
  const medusaConfig = byName.get('config.json')
  if (loraConfig === undefined && medusaConfig === undefined) {
    return { problem: 'neither adapter_config.json (LoRA) nor config.json (Medusa) is in the folder' }
  }
  if (loraConfig !== undefined) {
    const weights = first(LORA_WEIGHTS)
    if (weights === undefined && medusaConfig === undefined) {
      return { problem: 'adapter_config.json is there but neither adapter_model.safetensors nor adapter_model.bin' }
    }
    picked.push(loraConfig)
    if (weights !== undefined) picked.push(weights)
  }
  if (medusaConfig !== undefined) {
    const weights = first(MEDUSA_WEIGHTS)
    // A bare config.json next to a LoRA is just metadata; without LoRA it must come with weights.
    if (weights === undefined && loraConfig === undefined) {
      return { problem: 'config.json is there but no Medusa weights (medusa_lm_head.safetensors)' }
    }
    picked.push(medusaConfig)
    if (weights !== undefined) picked.push(weights)
  }
  for (const name of TOKENIZER_FILES) {
    const file = byName.get(name)
    if (file !== undefined) picked.push(file)
  }
  return { files: picked }
}
