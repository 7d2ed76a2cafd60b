/**
 * "Did you mean" suggestions for unknown configuration keys. A typo such as `max_batch_sise`
 * should point at `max_batch_size`, while an unrelated key should get the list of known keys.
 */

/** Levenshtein edit distance (insert, delete, substitute; each costs 1). */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      current.push(Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost))
    }
    previous = current
  }
  return previous[b.length]!
}

/**
 * The known key closest to `key`, or null when none is plausibly meant. A candidate counts when
 * it is within a third of the key's length (at least 2 edits), or when the two differ only in
 * case, `-`/`_`, or one contains the other (`batch_size` for `max_batch_size`).
 */
export function closestKey(key: string, known: readonly string[]): string | null {
  const normalize = (s: string): string => s.toLowerCase().replace(/-/g, '_')
  const wanted = normalize(key)
  let best: string | null = null
  let bestDistance = Infinity
  for (const candidate of known) {
    const normalized = normalize(candidate)
    if (normalized === wanted) return candidate
    const distance = editDistance(wanted, normalized)
    const contains = wanted.length >= 4 && (normalized.includes(wanted) || wanted.includes(normalized))
    const limit = Math.max(2, Math.floor(wanted.length / 3))
    if ((distance <= limit || contains) && distance < bestDistance) {
      best = candidate
      bestDistance = distance
    }
  }
  return best
}
