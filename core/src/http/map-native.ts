import { ERRORS } from '../errors/registry.ts'
import type { LoomError } from '../errors/loom-error.ts'

/** LoRAX's error body (`ErrorResponse`): used by the native routes and on native streams. */
export interface NativeErrorBody {
  readonly error: string
  readonly error_type: string
}

/** The native error body of `err`; its HTTP status is `err.status`. */
export function toNativeError(err: LoomError): NativeErrorBody {
  return { error: err.message, error_type: ERRORS[err.code].nativeType }
}
