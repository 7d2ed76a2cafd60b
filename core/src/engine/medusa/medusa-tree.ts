/**
 * The sparse candidate tree Medusa verifies in one step (Medusa paper §2.1.2, FasterDecoding's
 * `medusa_choices`). A choice is a path of top-k ranks: `[0]` is head 0's best token, `[0, 1]` is
 * head 1's second-best token following it, and so on; head `d - 1` proposes the tokens at depth `d`.
 *
 * Nodes are numbered like the reference implementation: node 0 is the root (the last accepted
 * token, fed this step), then the choices sorted by (depth, lexicographic). Sorting by depth
 * makes every prefix of the node list closed under ancestors, so a smaller tree is always a
 * prefix of the full one: the engine shrinks trees (depth limits, token budget, free blocks) by
 * taking the first `n` nodes.
 */

/**
 * Default tree: the first 24 choices of Medusa's `mc_sim_7b_63` (ordered there by estimated
 * acceptance) plus the depth-4 chain `[0, 0, 0, 0]`, so four heads can all contribute: 25
 * candidates, 26 tokens per verification row. Small enough for CPU verification.
 */
export const DEFAULT_MEDUSA_CHOICES: readonly (readonly number[])[] = [
  [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5],
  [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [0, 0, 0, 0],
] // prettier-ignore

/** A validated, sorted candidate tree. */
export class MedusaTree {
  /** Nodes including the root. */
  readonly size: number
  /** Depth of each node (root 0). */
  readonly depth: Int32Array
  /** Parent of each node (root -1). */
  readonly parent: Int32Array
  /** Top-k rank of each node within its head's proposals (root -1). */
  readonly rank: Int32Array
  /** Children of each node, ascending. */
  readonly children: readonly Int32Array[]
  /** Deepest node. */
  readonly maxDepth: number
  /** Top-k needed from head `d` (`max rank + 1` over nodes at depth `d + 1`). */
  readonly topKPerHead: Int32Array
  /** Each node's path of ranks joined by commas (root: `''`), the key `nodeOf` looks up. */
  readonly paths: readonly string[]
  /** Node of a path key (see `paths`). */
  readonly nodeOf: ReadonlyMap<string, number>
  /** `[size, size]` 0/1: `ancestorMask[i*size + j]` iff node `j` is node `i` or one of its ancestors. */
  private readonly ancestorMask: Uint8Array

  /**
   * @param choices paths of non-negative ranks; every proper prefix of a path must itself be a
   *   choice. Duplicates are refused. Throws `RangeError` naming the bad entry.
   */
  constructor(choices: readonly (readonly number[])[]) {
    const seen = new Set<string>()
    for (const [i, path] of choices.entries()) {
      if (!Array.isArray(path) || path.length === 0)
        throw new RangeError(`medusa_choices[${i}] must be a non-empty list of ranks`)
      for (const r of path) {
        if (!Number.isInteger(r) || r < 0 || r > 1023)
          throw new RangeError(`medusa_choices[${i}] has rank ${String(r)}; ranks are integers 0..1023`)
      }
      const key = path.join(',')
      if (seen.has(key)) throw new RangeError(`medusa_choices[${i}] ${JSON.stringify(path)} is listed twice`)
      seen.add(key)
    }
    for (const [i, path] of choices.entries()) {
      if (path.length > 1 && !seen.has(path.slice(0, -1).join(','))) {
        throw new RangeError(
          `medusa_choices[${i}] ${JSON.stringify(path)} has no parent ${JSON.stringify(path.slice(0, -1))} in the list`,
        )
      }
    }
    const sorted = [...choices].sort((a, b) => {
      if (a.length !== b.length) return a.length - b.length
      for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return a[k]! - b[k]!
      return 0
    })
    const size = sorted.length + 1
    const index = new Map<string, number>([['', 0]])
    this.size = size
    this.depth = new Int32Array(size)
    this.parent = new Int32Array(size).fill(-1)
    this.rank = new Int32Array(size).fill(-1)
    const children: number[][] = Array.from({ length: size }, () => [])
    sorted.forEach((path, i) => {
      const node = i + 1
      index.set(path.join(','), node)
      const parent = index.get(path.slice(0, -1).join(','))!
      this.depth[node] = path.length
      this.parent[node] = parent
      this.rank[node] = path[path.length - 1]!
      children[parent]!.push(node)
    })
    this.children = children.map((c) => Int32Array.from(c))
    this.nodeOf = index
    this.paths = ['', ...sorted.map((path) => path.join(','))]
    this.maxDepth = size > 1 ? this.depth[size - 1]! : 0
    this.topKPerHead = new Int32Array(this.maxDepth)
    for (let node = 1; node < size; node++) {
      const head = this.depth[node]! - 1
      this.topKPerHead[head] = Math.max(this.topKPerHead[head]!, this.rank[node]! + 1)
    }
    this.ancestorMask = new Uint8Array(size * size)
    for (let i = 0; i < size; i++) for (let j = i; j >= 0; j = this.parent[j]!) this.ancestorMask[i * size + j] = 1
  }

  /** How many leading nodes have depth ≤ `depth` (the largest prefix within that depth). */
  nodesWithin(depth: number): number {
    let n = 1
    while (n < this.size && this.depth[n]! <= depth) n++
    return n
  }

  /** The `[n, n]` tree attention mask of the first `n` nodes (ancestors and self only). */
  mask(n: number): Uint8Array {
    if (n === this.size) return this.ancestorMask
    const out = new Uint8Array(n * n)
    for (let i = 0; i < n; i++) out.set(this.ancestorMask.subarray(i * this.size, i * this.size + n), i * n)
    return out
  }
}
