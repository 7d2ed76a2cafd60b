import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { ChatMessage, ChatTemplate, TemplateEngine } from '../contracts/template-engine.ts'
import type { Tokenizer } from '../contracts/tokenizer.ts'
import { LoomError } from '../errors/index.ts'
import { readTokenizerSettings, type TokenizerSettings } from '../tokenizer/index.ts'

interface CompiledChat {
  readonly template: ChatTemplate
  readonly bosToken: string
  readonly eosToken: string
}

/**
 * Picks and renders chat templates: the adapter's own (its `tokenizer_config.json` or
 * `chat_template.jinja`) when it ships one, else the base model's; with neither, a 422 that sends
 * the caller to `/v1/completions`. Compiled templates are cached per directory.
 *
 * The rendered prompt is always tokenized with the base tokenizer: a LoRA adapter cannot change
 * the embedding table, so an adapter's tokenizer can only differ in its template and special-token
 * strings.
 */
export class ChatTemplates {
  readonly #engine: TemplateEngine
  readonly #base: CompiledChat | null
  readonly #modelId: string
  readonly #byDir = new Map<string, Promise<CompiledChat | null>>()

  constructor(engine: TemplateEngine, baseTokenizer: Tokenizer, modelId: string) {
    this.#engine = engine
    this.#modelId = modelId
    this.#base = baseTokenizer.chatTemplate
      ? {
          template: engine.compile(baseTokenizer.chatTemplate, `${modelId} chat_template`),
          bosToken: baseTokenizer.bosToken ?? '',
          eosToken: baseTokenizer.eosToken ?? '',
        }
      : null
  }

  /** Whether the base model has a template (for errors before any adapter is fetched). */
  get hasBaseTemplate(): boolean {
    return this.#base !== null
  }

  /**
   * Render `messages` for the model or adapter in `adapterDir` (null: base model), with
   * `add_generation_prompt` so the model answers as the assistant.
   */
  async render(messages: readonly ChatMessage[], adapterDir: string | null, requested: string): Promise<string> {
    const chat = (adapterDir === null ? null : await this.#forDir(adapterDir)) ?? this.#base
    if (chat === null) throw new LoomError('template_missing', { model: requested || this.#modelId })
    return chat.template.render({
      messages,
      bos_token: chat.bosToken,
      eos_token: chat.eosToken,
      add_generation_prompt: true,
    })
  }

  #forDir(dir: string): Promise<CompiledChat | null> {
    let compiled = this.#byDir.get(dir)
    if (!compiled) {
      compiled = this.#compileDir(dir)
      compiled.catch(() => this.#byDir.delete(dir))
      this.#byDir.set(dir, compiled)
    }
    return compiled
  }

  async #compileDir(dir: string): Promise<CompiledChat | null> {
    const text = await readFile(join(dir, 'tokenizer_config.json'), 'utf8').catch(() => null)
    let config: Record<string, unknown> = {}
    if (text !== null) {
      try {
        config = JSON.parse(text) as Record<string, unknown>
      } catch (err) {
        throw new LoomError('template_error', { detail: `${dir}/tokenizer_config.json: ${(err as Error).message}` })
      }
    }
    const settings: TokenizerSettings = readTokenizerSettings(dir, config)
    if (settings.chatTemplate === null) return null
    return {
      template: this.#engine.compile(settings.chatTemplate, 'the adapter chat_template'),
      bosToken: settings.bosToken ?? this.#base?.bosToken ?? '',
      eosToken: settings.eosToken ?? this.#base?.eosToken ?? '',
    }
  }
}
