import { isLoomError } from '../errors/index.ts'

/**
 * The one line the CLI prints when startup fails: `[code] message`, no stack trace. A startup
 * error is something the user fixes in their configuration or environment, so the message is the
 * whole story; an unexpected error keeps its message under `internal_error`.
 */
export function formatStartupError(err: unknown): string {
  if (isLoomError(err)) return `[${err.code}] ${err.message}`
  const message = err instanceof Error ? err.message : String(err)
  return `[internal_error] ${message}`
}
