/**
 * What TensorRT-LLM's guided decoding (xgrammar) needs to know about the tokenizer, read from the
 * model directory the core serves: the vocabulary as token strings indexed by id (TensorRT-LLM's own
 * Python server passes `tokenizer.get_vocab()` sorted by id), the `tokenizer.json` text (xgrammar
 * reads the decoder from it: byte-level, byte fallback) and the ids that end a sequence.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { LoomError } from '@loom/core'

/** The executor's `guidedDecoding` option. */
export interface GuidedVocab {
  readonly encodedVocab: string[]
  readonly tokenizerJson: string
  readonly stopTokenIds: number[]
}

/**
 * Read the guided-decoding vocabulary of the model in `modelDir`, `vocabSize` entries long (the
 * engine's vocabulary, which may pad the tokenizer's; padding ids get empty strings, which no
 * grammar can produce).
 */
export async function readGuidedVocab(modelDir: string, vocabSize: number): Promise<GuidedVocab> {
  const invalid = (detail: string): LoomError => new LoomError('model_invalid', { path: modelDir, detail })
  const file = join(modelDir, 'tokenizer.json')
  if (!existsSync(file)) throw invalid('guided_decoding needs tokenizer.json, which is missing')
  const tokenizerJson = await readFile(file, 'utf8')
  const parsed = JSON.parse(tokenizerJson) as {
    model?: { vocab?: Record<string, number> | [string, number][] }
    added_tokens?: { id: number; content: string }[]
  }
  const vocab = new Array<string>(vocabSize).fill('')
  const put = (token: string, id: number): void => {
    if (!Number.isInteger(id) || id < 0) throw invalid(`tokenizer.json: token ${JSON.stringify(token)} has id ${id}`)
    if (id >= vocabSize) {
      throw invalid(
        `tokenizer.json: token ${JSON.stringify(token)} has id ${id}; the engine's vocabulary has ${vocabSize}`,
      )
    }
    vocab[id] = token
  }
  const model = parsed.model?.vocab
  // BPE and WordPiece keep `{token: id}`; Unigram keeps `[[token, score], …]` in id order.
  if (Array.isArray(model)) model.forEach(([token], id) => put(token, id))
  else if (model !== undefined) for (const [token, id] of Object.entries(model)) put(token, id)
  else throw invalid('tokenizer.json has no model.vocab')
  for (const added of parsed.added_tokens ?? []) put(added.content, added.id)
  return { encodedVocab: vocab, tokenizerJson, stopTokenIds: await readEosIds(modelDir) }
}

/** `eos_token_id` of `generation_config.json`, else of `config.json` (a number or a list). */
async function readEosIds(modelDir: string): Promise<number[]> {
  for (const name of ['generation_config.json', 'config.json']) {
    const file = join(modelDir, name)
    if (!existsSync(file)) continue
    const eos = (JSON.parse(await readFile(file, 'utf8')) as { eos_token_id?: unknown }).eos_token_id
    const ids = (Array.isArray(eos) ? eos : [eos]).filter((id): id is number => Number.isInteger(id))
    if (ids.length > 0) return ids
  }
  return []
}
