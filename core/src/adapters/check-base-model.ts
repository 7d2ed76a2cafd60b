import { readFile } from 'node:fs/promises'
import { basename, join } from 'node:path'
import type { Logger } from '../contracts/logger.ts'

/**
 * PEFT records the model an adapter was trained on (`base_model_name_or_path`). A different name
 * is not proof of incompatibility — fine-tunes of one model go by many names, and shape checks
 * catch a truly foreign adapter — so, as LoRAX does, it is reported as a warning, not refused.
 */
export async function warnOnOtherBaseModel(
  adapterDir: string,
  adapterId: string,
  served: { readonly id: string; readonly path: string },
  logger: Logger,
): Promise<void> {
  const text = await readFile(join(adapterDir, 'adapter_config.json'), 'utf8').catch(() => null)
  if (text === null) return
  let base: unknown
  try {
    base = (JSON.parse(text) as { base_model_name_or_path?: unknown }).base_model_name_or_path
  } catch {
    return // read-lora reports malformed JSON with the adapter's id
  }
  if (typeof base !== 'string' || base === '') return
  const names = new Set([served.id, basename(served.path), served.path])
  if (names.has(base) || names.has(basename(base))) return
  logger.warn(
    { adapter: adapterId, adapterBase: base, servedModel: served.id },
    'adapter was trained on another base model name; its shapes match, so it is used',
  )
}
