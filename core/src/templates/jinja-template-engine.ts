import { Template } from '@huggingface/jinja'
import type { ChatTemplate, ChatTemplateContext, TemplateEngine } from '../contracts/template-engine.ts'
import { LoomError } from '../errors/index.ts'

/**
 * The default `TemplateEngine`: Hugging Face chat templates rendered with `@huggingface/jinja`.
 * Syntax errors surface at compile time and runtime errors (`raise_exception`, missing variables)
 * at render time, both as a 422 `template_error` naming where the template came from.
 */
export class JinjaTemplateEngine implements TemplateEngine {
  compile(source: string, origin: string): ChatTemplate {
    let template: Template
    try {
      template = new Template(source)
    } catch (err) {
      throw new LoomError('template_error', { detail: `${origin}: ${(err as Error).message}` }, { cause: err })
    }
    return {
      render(context: ChatTemplateContext): string {
        try {
          return template.render({ ...context })
        } catch (err) {
          throw new LoomError('template_error', { detail: `${origin}: ${(err as Error).message}` }, { cause: err })
        }
      },
    }
  }
}
