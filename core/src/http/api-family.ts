/**
 * Loom answers in two API families: the LoRAX-style native API and the OpenAI-compatible API under
 * `/v1`. The family of a request decides the shape of its errors, including on unknown routes.
 */
export type ApiFamily = 'native' | 'openai'

/** `/v1` and everything below it is the OpenAI family; every other URL is native. */
export function apiFamilyOf(url: string): ApiFamily {
  const path = pathOf(url)
  return path === '/v1' || path.startsWith('/v1/') ? 'openai' : 'native'
}

/** The path of a request URL, without its query string (which may carry a token). */
export function pathOf(url: string): string {
  const end = url.search(/[?#]/)
  return end === -1 ? url : url.slice(0, end)
}
