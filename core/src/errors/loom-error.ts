import { ERRORS, type ErrorCode } from './registry.ts'

/** Values substituted into a message template. Never put a secret here. */
export type ErrorParams = Readonly<Record<string, string | number | boolean | null | undefined>>

function render(template: string, params: ErrorParams): string {
  return template.replace(/\{(\w+)\}/g, (whole, name: string) => {
    const value = params[name]
    return value === undefined ? whole : String(value)
  })
}

/**
 * The one error type Loom throws on purpose. Its `code` selects the HTTP status and the error
 * types of each API family; `param` names the request field at fault (OpenAI's `error.param`).
 */
export class LoomError extends Error {
  override readonly name = 'LoomError'
  readonly code: ErrorCode
  readonly params: ErrorParams
  readonly param: string | null

  constructor(code: ErrorCode, params: ErrorParams = {}, options: { param?: string; cause?: unknown } = {}) {
    super(render(ERRORS[code].message, params), options.cause === undefined ? undefined : { cause: options.cause })
    this.code = code
    this.params = params
    this.param = options.param ?? null
  }

  get status(): number {
    return ERRORS[this.code].status
  }
}

export function isLoomError(err: unknown): err is LoomError {
  return err instanceof LoomError
}

/**
 * Build the standard field error: "`parameters.top_p` must be > 0 and <= 1; received 1.5".
 * `received` is rendered with JSON, cut to 80 characters so a huge value cannot flood a response.
 */
export function fieldError(field: string, expected: string, received: unknown): LoomError {
  return new LoomError('validation_error', { field, expected, received: describeValue(received) }, { param: field })
}

/**
 * Characters JSON leaves raw that are invisible or reorder text in a log or terminal: DEL and the
 * C1 controls, line/paragraph separators, bidi overrides and isolates, the BOM. (JSON escapes the
 * C0 controls itself.)
 */
export const INVISIBLE_CHARACTERS = '\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff'
const INVISIBLE = new RegExp(`[${INVISIBLE_CHARACTERS}]`, 'g')

export function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing'
  let text: string
  try {
    text = JSON.stringify(value) ?? String(value)
  } catch {
    text = String(value)
  }
  // Escaped too, so a message (and the log line it becomes) shows what was sent.
  text = text.replace(INVISIBLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
  return text.length > 80 ? `${text.slice(0, 77)}...` : text
}
