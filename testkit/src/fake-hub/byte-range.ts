/** A satisfiable byte range of a file: `start` and `end` inclusive, as HTTP counts them. */
export interface ByteRange {
  readonly start: number
  readonly end: number
}

/**
 * Parse a `Range` header for a file of `size` bytes. Returns null when there is no header (or it is
 * not a single `bytes=` range, which servers may ignore), `'unsatisfiable'` for a range outside the
 * file (HTTP 416), else the range clamped to the file.
 */
export function parseRange(header: string | undefined, size: number): ByteRange | 'unsatisfiable' | null {
  if (header === undefined) return null
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim())
  if (!match || (match[1] === '' && match[2] === '')) return null
  if (match[1] === '') {
    // A suffix range: the last N bytes.
    const length = Number(match[2])
    if (length === 0 || size === 0) return 'unsatisfiable'
    return { start: Math.max(0, size - length), end: size - 1 }
  }
  const start = Number(match[1])
  const end = match[2] === '' ? size - 1 : Math.min(Number(match[2]), size - 1)
  if (start >= size || end < start) return 'unsatisfiable'
  return { start, end }
}
