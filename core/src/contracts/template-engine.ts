/** A chat message as templates see it (content chunks already flattened to text). */
export interface ChatMessage {
  readonly role: 'system' | 'user' | 'assistant' | 'tool' | 'developer'
  readonly content: string
  readonly name?: string
}

/** Variables a chat template is rendered with, as in Hugging Face `apply_chat_template`. */
export interface ChatTemplateContext {
  readonly messages: readonly ChatMessage[]
  readonly bos_token: string
  readonly eos_token: string
  readonly add_generation_prompt: boolean
  /** Anything else a template may read (tools, …). */
  readonly [key: string]: unknown
}

/** A compiled template, safe to render concurrently. */
export interface ChatTemplate {
  /** Render to the prompt text. Throws `template_error` (422) with the template's message, never a 500. */
  render(context: ChatTemplateContext): string
}

/** Compiles chat templates (Jinja). The default uses `@huggingface/jinja`; plugins may override. */
export interface TemplateEngine {
  /** Compile `source`; `origin` names where it came from (for error messages). Throws `template_error`. */
  compile(source: string, origin: string): ChatTemplate
}

/** Injection token for the `TemplateEngine`. */
export const TemplateEngine: unique symbol = Symbol('TemplateEngine')
