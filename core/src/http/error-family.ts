import type { LoomError } from '../errors/loom-error.ts'
import { apiFamilyOf, type ApiFamily } from './api-family.ts'
import { toNativeError, type NativeErrorBody } from './map-native.ts'
import { toOpenAiError, type OpenAiErrorBody } from './map-openai.ts'

/** How one API family writes an error. */
export interface ErrorFamily {
  readonly name: ApiFamily
  /**
   * The error as this family writes it: the JSON body of an error response (sent with
   * `err.status`), and also the `data:` payload of the error event on a stream that has already
   * started (native: `{"error","error_type"}`; OpenAI: `{"error":{message,type,param,code}}`).
   */
  payload(err: LoomError): NativeErrorBody | OpenAiErrorBody
}

const NATIVE: ErrorFamily = { name: 'native', payload: toNativeError }
const OPENAI: ErrorFamily = { name: 'openai', payload: toOpenAiError }

/** The error writer for a request URL (`/v1/*`: OpenAI; anything else: native). */
export function errorFamily(url: string): ErrorFamily {
  return apiFamilyOf(url) === 'openai' ? OPENAI : NATIVE
}
