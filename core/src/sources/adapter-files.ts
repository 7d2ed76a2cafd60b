/**
 * Which files of an adapter folder the runtime reads, and which of them to fetch. Every source
 * that downloads adapters (hub, S3, HTTP file servers, third-party ones) applies the same rule, so
 * one adapter gives the same files whichever store it comes from.
 */
import { MEDUSA_DRAFT_VOCAB_FILE, MEDUSA_WEIGHT_FILES } from '../adapters/read-medusa.ts'

/**
 * Medusa weights, in the order the core's Medusa reader tries them; only the first present is
 * fetched. `model.safetensors` counts only in a folder without `adapter_config.json`: next to a
 * LoRA it is a merged full model, which is large and not what the runtime wants.
 */
export { MEDUSA_WEIGHT_FILES }

/** The Medusa heads' draft vocabulary, fetched with Medusa weights when present. */
export { MEDUSA_DRAFT_VOCAB_FILE }

/** Marks a LoRA adapter (PEFT's config). */
export const LORA_CONFIG_FILE = 'adapter_config.json'

/** Marks a Medusa head (its `medusa_num_heads`, …). Next to a LoRA it is only metadata. */
export const MEDUSA_CONFIG_FILE = 'config.json'

/** LoRA weights, most preferred first: safetensors cannot carry code, so the `.bin` twin is never fetched. */
export const LORA_WEIGHT_FILES = ['adapter_model.safetensors', 'adapter_model.bin'] as const

/** The adapter's own tokenizer, fetched when present. */
export const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json'] as const

/**
 * Every file name the runtime may read from an adapter folder, in the order `pickAdapterFiles`
 * returns them. A source that must ask for names (a hub's `paths-info`, HEAD probes) asks for these.
 */
export const ADAPTER_FILE_NAMES: readonly string[] = [
  LORA_CONFIG_FILE,
  ...LORA_WEIGHT_FILES,
  MEDUSA_CONFIG_FILE,
  ...MEDUSA_WEIGHT_FILES,
  MEDUSA_DRAFT_VOCAB_FILE,
  ...TOKENIZER_FILES,
]

/** Whether `names` hold a config that makes the folder an adapter: LoRA or Medusa. */
export function hasAdapterConfig(names: Iterable<string>): boolean {
  for (const name of names) if (name === LORA_CONFIG_FILE || name === MEDUSA_CONFIG_FILE) return true
  return false
}

/** The files to fetch, in `ADAPTER_FILE_NAMES` order, and what kind of adapter they make. */
export interface PickedAdapterFiles {
  readonly files: string[]
  /** `adapter_config.json` is there. */
  readonly lora: boolean
  /** `config.json` comes with Medusa weights: the folder holds a Medusa head (alone or with a LoRA). */
  readonly medusa: boolean
}

/** Why a folder is not an adapter: a code to branch on and a sentence for error messages. */
export interface AdapterFilesProblem {
  readonly problem: 'no_config' | 'no_lora_weights' | 'no_medusa_weights'
  readonly detail: string
}

/**
 * Pick the adapter files among the file names of one folder (names relative to it; anything not
 * in `ADAPTER_FILE_NAMES` is ignored).
 *
 * - A LoRA needs `adapter_config.json` and one weights file: `adapter_model.safetensors`, else
 *   `adapter_model.bin`.
 * - A Medusa head needs `config.json` and the first of `MEDUSA_WEIGHT_FILES` present; its
 *   `medusa_draft_vocab.json` comes along when present.
 * - A folder with both configs is a LoRA, with a Medusa head when Medusa weights are there too;
 *   either part's weights are then enough.
 * - The tokenizer files come along when present.
 *
 * Returns the picked names, or the problem that makes the folder unusable.
 */
export function pickAdapterFiles(names: Iterable<string>): PickedAdapterFiles | AdapterFilesProblem {
  const present = new Set(names)
  const first = (candidates: readonly string[]) => candidates.find((name) => present.has(name))
  const lora = present.has(LORA_CONFIG_FILE)
  const medusaConfig = present.has(MEDUSA_CONFIG_FILE)
  if (!lora && !medusaConfig) {
    return {
      problem: 'no_config',
      detail: 'neither adapter_config.json (LoRA) nor config.json (Medusa) is in the folder',
    }
  }
  const loraWeights = lora ? first(LORA_WEIGHT_FILES) : undefined
  const medusaWeights = medusaConfig
    ? first(MEDUSA_WEIGHT_FILES.filter((name) => !lora || name !== 'model.safetensors'))
    : undefined
  if (lora && loraWeights === undefined && !medusaConfig) {
    return {
      problem: 'no_lora_weights',
      detail: 'adapter_config.json is there but neither adapter_model.safetensors nor adapter_model.bin',
    }
  }
  if (medusaConfig && medusaWeights === undefined && !lora) {
    return {
      problem: 'no_medusa_weights',
      detail: 'config.json is there but no Medusa weights (medusa_lm_head.safetensors)',
    }
  }
  const files = [
    lora ? LORA_CONFIG_FILE : undefined,
    loraWeights,
    medusaConfig ? MEDUSA_CONFIG_FILE : undefined,
    medusaWeights,
    medusaWeights !== undefined && present.has(MEDUSA_DRAFT_VOCAB_FILE) ? MEDUSA_DRAFT_VOCAB_FILE : undefined,
    ...TOKENIZER_FILES.filter((name) => present.has(name)),
  ].filter((name): name is string => name !== undefined)
  return { files, lora, medusa: medusaWeights !== undefined }
}
