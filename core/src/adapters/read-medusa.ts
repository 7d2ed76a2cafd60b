/**
 * Reads a Medusa adapter in LoRAX's layout (lorax.md §5; LoRAX `adapters/medusa.py`) into the
 * runtime's `MedusaWeights`, checked against the loaded model:
 *
 * - `config.json` with `medusa_num_heads` and `medusa_num_layers` (positive integers); when it
 *   states `hidden_size` or `vocab_size` they must be the model's; `version` is informational.
 * - Weights in `medusa_lm_head.safetensors` (FasterDecoding's name) or `model.safetensors`.
 *   Head `h` has residual blocks `{h}.{l}.linear.weight` `[hidden, hidden]` and
 *   `{h}.{l}.linear.bias` `[hidden]` for `l < medusa_num_layers`, and optionally its own LM head
 *   `{h}.{medusa_num_layers}.weight` `[vocab, hidden]`. Names may carry a `medusa_head.` prefix
 *   (a whole-model state dict).
 * - Like LoRAX (`MedusaModel`), the version follows the tensors: with per-head LM heads it is
 *   version 1 (own heads); without, version 2 (the heads reuse the base model's LM head). A file
 *   with LM heads for some heads only is refused.
 * - Optionally `medusa_draft_vocab.json` (Loom's, not LoRAX's): `{"token_ids": [...]}`, the
 *   distinct token ids the heads draft from (FR-Spec's frequency-ranked vocabulary; any order),
 *   becoming `MedusaWeights.draftVocabulary`, sorted. Heads then cost a fraction of a full LM
 *   head per step and outputs do not change (drafts are verified).
 *
 * Every failure is an `adapter_invalid` naming the adapter and what does not fit.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { MedusaWeights, ModelSpec } from '../contracts/step-runner.ts'
import { LoomError } from '../errors/index.ts'
import { SafetensorsFile } from './safetensors.ts'

/** Weight files tried in order. */
export const MEDUSA_WEIGHT_FILES = ['medusa_lm_head.safetensors', 'model.safetensors'] as const

/** The heads' draft vocabulary (optional). */
export const MEDUSA_DRAFT_VOCAB_FILE = 'medusa_draft_vocab.json'

/** Most heads / residual layers accepted (real adapters have 1–5 heads and 1 layer). */
const MAX_HEADS = 16
const MAX_LAYERS = 8

function fail(id: string, detail: string): LoomError {
  return new LoomError('adapter_invalid', { id, detail })
}

/** The `config.json` fields that shape the heads. */
export interface MedusaConfig {
  readonly numHeads: number
  readonly numLayers: number
}

async function readMedusaConfig(dir: string, id: string, spec: ModelSpec): Promise<MedusaConfig> {
  const path = join(dir, 'config.json')
  if (!existsSync(path)) throw fail(id, 'config.json is missing')
  let raw: unknown
  try {
    raw = JSON.parse(await readFile(path, 'utf8'))
  } catch (err) {
    throw fail(id, `config.json is not valid JSON (${err instanceof Error ? err.message : String(err)})`)
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw fail(id, 'config.json is not an object')
  const c = raw as Record<string, unknown>
  const count = (field: string, max: number): number => {
    const v = c[field]
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max)
      throw fail(id, `config.json: ${field} is ${JSON.stringify(v)}; expected an integer from 1 to ${max}`)
    return v
  }
  const numHeads = count('medusa_num_heads', MAX_HEADS)
  const numLayers = count('medusa_num_layers', MAX_LAYERS)
  for (const [field, expected] of [
    ['hidden_size', spec.hiddenSize],
    ['vocab_size', spec.vocabSize],
  ] as const) {
    const v = c[field]
    if (v !== undefined && v !== null && v !== expected)
      throw fail(id, `config.json: ${field} is ${JSON.stringify(v)}; the model's is ${expected}`)
  }
  return { numHeads, numLayers }
}

/** The first weight file present, parsed. */
async function readWeights(dir: string, id: string): Promise<SafetensorsFile> {
  for (const name of MEDUSA_WEIGHT_FILES) {
    const path = join(dir, name)
    if (existsSync(path)) return SafetensorsFile.read(path, id)
  }
  throw fail(id, `no weight file: expected ${MEDUSA_WEIGHT_FILES.join(' or ')}`)
}

/** `medusa_draft_vocab.json` as ascending ids, or undefined when the file is absent. */
async function readDraftVocabulary(dir: string, id: string, vocabSize: number): Promise<Int32Array | undefined> {
  const path = join(dir, MEDUSA_DRAFT_VOCAB_FILE)
  if (!existsSync(path)) return undefined
  const where = MEDUSA_DRAFT_VOCAB_FILE
  let raw: unknown
  try {
    raw = JSON.parse(await readFile(path, 'utf8'))
  } catch (err) {
    throw fail(id, `${where} is not valid JSON (${err instanceof Error ? err.message : String(err)})`)
  }
  const list = raw !== null && typeof raw === 'object' ? (raw as Record<string, unknown>).token_ids : undefined
  if (!Array.isArray(list) || list.length === 0 || list.length > vocabSize)
    throw fail(id, `${where}: token_ids must be an array of 1 to ${vocabSize} token ids`)
  const ids = new Int32Array(list.length)
  const seen = new Set<number>()
  list.forEach((v: unknown, i) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= vocabSize)
      throw fail(
        id,
        `${where}: token_ids[${i}] is ${JSON.stringify(v)}; expected a token id from 0 to ${vocabSize - 1}`,
      )
    if (seen.has(v)) throw fail(id, `${where}: token id ${v} is listed twice`)
    seen.add(v)
    ids[i] = v
  })
  return ids.sort()
}

/**
 * Parse and validate the Medusa adapter in `dir`. `id` names it in errors and becomes
 * `MedusaWeights.key`.
 */
export async function readMedusaAdapter(dir: string, id: string, spec: ModelSpec): Promise<MedusaWeights> {
  const config = await readMedusaConfig(dir, id, spec)
  const file = await readWeights(dir, id)
  const names = file.names()
  const prefix = names.some((n) => n.startsWith('medusa_head.')) ? 'medusa_head.' : ''
  const H = spec.hiddenSize
  const V = spec.vocabSize
  const { numHeads, numLayers } = config

  const expected = new Set<string>()
  const tensor = (name: string, shape: readonly number[]): Float32Array => {
    const full = prefix + name
    expected.add(full)
    const entry = file.entry(full)
    if (entry === undefined) throw fail(id, `tensor ${full} is missing`)
    if (entry.shape.length !== shape.length || entry.shape.some((d, i) => d !== shape[i]))
      throw fail(id, `tensor ${full} has shape [${entry.shape.join(', ')}]; expected [${shape.join(', ')}]`)
    const values = file.float32(full)
    for (let i = 0; i < values.length; i++) {
      if (!Number.isFinite(values[i]!)) throw fail(id, `tensor ${full} holds a non-finite value at index ${i}`)
    }
    return values
  }

  const ownHeads = Array.from(
    { length: numHeads },
    (_, h) => file.entry(`${prefix}${h}.${numLayers}.weight`) !== undefined,
  )
  const own = ownHeads.every(Boolean)
  if (!own && ownHeads.some(Boolean)) {
    throw fail(
      id,
      `heads ${ownHeads.flatMap((o, h) => (o ? [h] : [])).join(', ')} have their own LM head (${prefix}{h}.${numLayers}.weight) but the others do not`,
    )
  }
  const heads: MedusaWeights['heads'][number][] = []
  for (let h = 0; h < numHeads; h++) {
    const blocks = []
    for (let l = 0; l < numLayers; l++) {
      blocks.push({ weight: tensor(`${h}.${l}.linear.weight`, [H, H]), bias: tensor(`${h}.${l}.linear.bias`, [H]) })
    }
    heads.push(own ? { blocks, lmHead: tensor(`${h}.${numLayers}.weight`, [V, H]) } : { blocks })
  }
  // A head or layer beyond the config means the config and the weights disagree.
  const extra = names.find((n) => /^(?:medusa_head\.)?\d+\.\d+\./.test(n) && !expected.has(n))
  if (extra !== undefined) {
    throw fail(
      id,
      `tensor ${extra} does not belong to ${numHeads} heads of ${numLayers} layers (config.json medusa_num_heads / medusa_num_layers)`,
    )
  }
  const draftVocabulary = await readDraftVocabulary(dir, id, V)
  return { kind: 'medusa', key: id, numHeads, numLayers, heads, ...(draftVocabulary ? { draftVocabulary } : {}) }
}
