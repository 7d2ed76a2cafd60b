import { ERRORS, type OpenAiErrorType } from '../errors/registry.ts'
import type { LoomError } from '../errors/loom-error.ts'

/**
 * OpenAI's error body. The official SDK reads `error.message` for the exception text and turns a
 * `data: {"error": …}` stream event into an `APIError`, so the same shape serves both.
 */
export interface OpenAiErrorBody {
  readonly error: {
    readonly message: string
    readonly type: OpenAiErrorType
    /** The request field at fault (`messages[0].content`, `temperature`), or null. */
    readonly param: string | null
    /** Loom's stable error code (`validation_error`, `adapter_not_found`, …). */
    readonly code: string
  }
}

/** The OpenAI error body of `err`; its HTTP status is `err.status`. */
export function toOpenAiError(err: LoomError): OpenAiErrorBody {
  return { error: { message: err.message, type: ERRORS[err.code].openaiType, param: err.param, code: err.code } }
}
