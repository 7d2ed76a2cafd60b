import { LoomError } from '@loom/core'

/** One path segment of an adapter id or file name: no `.`/`..`, no separators, no URL syntax. */
const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]*$/

/** Whether `value` is a safe relative path of `/`-separated segments (`acme/tiny-lora`, `tokenizer.json`). */
export function isSafeRelativePath(value: string): boolean {
  return value.split('/').every((segment) => SEGMENT.test(segment) && segment !== '..')
}

/**
 * Check an `adapter_id` before it becomes part of a URL: a path under `base_url` such as
 * `acme/tiny-lora`. Refusing `..`, `?`, `#` and `%` keeps every request inside `base_url`.
 */
export function checkAdapterId(id: string, source: string): void {
  if (!isSafeRelativePath(id)) {
    throw new LoomError('adapter_id_invalid', {
      id,
      source,
      detail:
        'expected a path of letters, digits, `.`, `_` and `-` segments separated by `/` (for example acme/my-lora)',
    })
  }
}

/** The URL of `file` of adapter `id` under `baseUrl` (which ends with `/`). */
export function fileUrl(baseUrl: URL, id: string, file: string): URL {
  return new URL(`${id}/${file}`, baseUrl)
}
