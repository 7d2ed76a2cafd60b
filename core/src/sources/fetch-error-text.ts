/**
 * The most specific reason a failed `fetch` gives, for error messages: Node's fetch (undici) says
 * only `fetch failed` or `terminated` and hides the socket error under `cause`, so its code is
 * added (`fetch failed (ECONNREFUSED)`). Built from error messages and codes only, never from a
 * request, so it cannot carry a header or a token.
 */
export function fetchErrorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err)
  const cause = err.cause
  if (cause instanceof Error) return `${err.message} (${(cause as NodeJS.ErrnoException).code ?? cause.message})`
  return err.message
}
