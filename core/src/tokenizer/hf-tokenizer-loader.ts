/**
 * The default `TokenizerLoader`: reads `tokenizer.json` and `tokenizer_config.json` from a model or
 * adapter directory.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Tokenizer, TokenizerLoader } from '../contracts/tokenizer.ts'
import { LoomError } from '../errors/index.ts'
import { HfTokenizer } from './hf-tokenizer.ts'
import { readTokenizerSettings } from './tokenizer-config.ts'

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

async function readJson(path: string, dir: string): Promise<Record<string, unknown>> {
  let parsed: unknown
  try {
    parsed = JSON.parse(await readFile(path, 'utf8'))
  } catch (err) {
    throw new LoomError('tokenizer_invalid', { path: dir, detail: `${path}: ${describe(err)}` }, { cause: err })
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new LoomError('tokenizer_invalid', { path: dir, detail: `${path} is not a JSON object` })
  }
  return parsed as Record<string, unknown>
}

export class HfTokenizerLoader implements TokenizerLoader {
  async load(dir: string): Promise<Tokenizer | null> {
    const tokenizerPath = join(dir, 'tokenizer.json')
    if (!existsSync(tokenizerPath)) return null
    const tokenizerJson = await readJson(tokenizerPath, dir)
    const configPath = join(dir, 'tokenizer_config.json')
    const config = existsSync(configPath) ? await readJson(configPath, dir) : {}
    try {
      const tokenizer = new HfTokenizer(tokenizerJson, config, readTokenizerSettings(dir, config))
      // Unsupported components (a WordLevel model, a regex the JS engine rejects) may only fail on
      // first use; fail here, at load, instead of on a user's request.
      tokenizer.decode(tokenizer.encode('Hello, world! 123', { addSpecialTokens: true }), { skipSpecialTokens: false })
      // The streaming decoder's byte table too, so the first request does not build and check it.
      tokenizer.createDecoder({ skipSpecialTokens: true })
      return tokenizer
    } catch (err) {
      throw new LoomError('tokenizer_invalid', { path: dir, detail: describe(err) }, { cause: err })
    }
  }
}
