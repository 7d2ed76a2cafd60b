/**
 * The parts of `tokenizer_config.json` (and the newer stand-alone chat template files) the server
 * needs: BOS/EOS strings and the chat template.
 */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

/** What the server takes from a tokenizer's configuration files. */
export interface TokenizerSettings {
  readonly bosToken: string | null
  readonly eosToken: string | null
  readonly chatTemplate: string | null
}

/**
 * Special tokens are stored either as strings or as serialised `AddedToken` objects
 * (`{"__type": "AddedToken", "content": "<s>", …}`); templates need the string.
 */
export function tokenString(value: unknown): string | null {
  if (typeof value === 'string') return value
  if (value !== null && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content
  }
  return null
}

/**
 * `chat_template` is a string, or a list of `{name, template}` where transformers uses the entry
 * named `default` when the caller names none.
 */
export function chatTemplateOf(value: unknown): string | null {
  if (typeof value === 'string') return value
  if (Array.isArray(value)) {
    const entry = value.find((e) => e !== null && typeof e === 'object' && (e as { name?: unknown }).name === 'default')
    const template = (entry as { template?: unknown } | undefined)?.template
    return typeof template === 'string' ? template : null
  }
  return null
}

/**
 * Read the settings from a parsed `tokenizer_config.json` (may be empty), falling back to
 * `chat_template.jinja` / `chat_template.json` in `dir`, where transformers ≥ 4.43 saves templates.
 */
export function readTokenizerSettings(dir: string, config: Readonly<Record<string, unknown>>): TokenizerSettings {
  let chatTemplate = chatTemplateOf(config.chat_template)
  if (chatTemplate === null && existsSync(join(dir, 'chat_template.jinja'))) {
    chatTemplate = readFileSync(join(dir, 'chat_template.jinja'), 'utf8')
  } else if (chatTemplate === null && existsSync(join(dir, 'chat_template.json'))) {
    const parsed = JSON.parse(readFileSync(join(dir, 'chat_template.json'), 'utf8')) as { chat_template?: unknown }
    chatTemplate = chatTemplateOf(parsed.chat_template)
  }
  return { bosToken: tokenString(config.bos_token), eosToken: tokenString(config.eos_token), chatTemplate }
}
