import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { LoomError } from '../errors/index.ts'

function ids(value: unknown): number[] {
  if (typeof value === 'number' && Number.isInteger(value)) return [value]
  if (Array.isArray(value)) return value.filter((v): v is number => typeof v === 'number' && Number.isInteger(v))
  return []
}

async function readJson(path: string): Promise<Record<string, unknown> | null> {
  const text = await readFile(path, 'utf8').catch(() => null)
  if (text === null) return null
  try {
    return JSON.parse(text) as Record<string, unknown>
  } catch (err) {
    throw new LoomError('model_invalid', { path, detail: `not valid JSON: ${(err as Error).message}` })
  }
}

/**
 * End-of-sequence token ids for the served model: `generation_config.json`'s `eos_token_id`
 * (a number or a list, as Llama 3 ships it), else `config.json`'s.
 */
export async function readEosTokenIds(modelDir: string): Promise<number[]> {
  const generation = await readJson(join(modelDir, 'generation_config.json'))
  const fromGeneration = ids(generation?.eos_token_id)
  if (fromGeneration.length > 0) return fromGeneration
  const config = await readJson(join(modelDir, 'config.json'))
  return ids(config?.eos_token_id)
}
