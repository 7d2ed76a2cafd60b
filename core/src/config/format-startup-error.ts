import { isLoomError } from '../errors/index.ts'
import { maskCredentials } from './shown-value.ts'

/**
 * The one line the CLI prints when startup fails: `[code] message`, no stack trace. A startup
 * error is something the user fixes in their configuration or environment, so the message is the
 * whole story; an unexpected error keeps its message under `internal_error`. Credentials that
 * reached a message anyway (a URL's userinfo, a `Bearer` token) are masked on the way out.
 */
export function formatStartupError(err: unknown): string {
  if (isLoomError(err)) return maskCredentials(`[${err.code}] ${err.message}`)
  const message = err instanceof Error ? err.message : String(err)
  return maskCredentials(`[internal_error] ${message}`)
}
