import { MedusaTree } from './medusa-tree.ts'

/** Trees a family keeps built across re-rankings (see `TreeFamily.built`). */
const MAX_BUILT_TREES = 128

/** A tree of the family and where its nodes sit in the full tree (whose numbering drafts use). */
export interface SubTree {
  readonly tree: MedusaTree
  /** `fullNode[n]`: the full tree's node for node `n` of this tree. */
  readonly fullNode: Int32Array
}

/**
 * The nested trees the adaptive policy chooses from: `get(k)` is the tree of the first `k` choices
 * in acceptance order. That order is the configured list's when every path comes after its parent
 * there (Medusa's published trees, `DEFAULT_MEDUSA_CHOICES` included, list paths by estimated
 * acceptance), else the sorted node order. Small trees of the list's order are deep chains first
 * (`[0]`, `[0, 0]`, `[1]`, ...), where prefixes of the sorted order would be wide and shallow.
 */
export class TreeFamily {
  readonly full: SubTree
  /** `order[k]`: the full tree's node added by the `k + 1`-th choice. */
  order: Int32Array
  private choices: readonly (readonly number[])[]
  private readonly cache = new Map<number, SubTree>()
  /**
   * Trees built, by their node set (a tree depends on which choices it has, not their order):
   * re-ranking often swaps two nodes of similar reach back and forth, and building a tree (its
   * ancestor mask and path maps) cost more than the rest of a batch-1 plan.
   */
  private readonly built = new Map<string, SubTree>()

  constructor(tree: MedusaTree, choices: readonly (readonly number[])[]) {
    const identity = new Int32Array(tree.size)
    for (let n = 0; n < tree.size; n++) identity[n] = n
    this.full = { tree, fullNode: identity }
    const seen = new Set<string>([''])
    let closed = true
    for (const path of choices) {
      if (!seen.has(path.slice(0, -1).join(','))) closed = false
      seen.add(path.join(','))
    }
    this.choices = closed ? choices : tree.paths.slice(1).map((key) => key.split(',').map(Number))
    this.order = Int32Array.from(this.choices, (path) => tree.nodeOf.get(path.join(','))!)
    this.cache.set(this.choices.length, this.full)
  }

  /**
   * Re-rank the choices by `score` (per full-tree node, higher first; the adaptive policy passes
   * each node's estimated chance of being reached), keeping every prefix a tree: a node is placed
   * only after its parent. Trees handed out before stay valid. Returns whether the order changed.
   */
  reorder(score: Float64Array): boolean {
    const tree = this.full.tree
    const placed = new Uint8Array(tree.size)
    placed[0] = 1
    const order = new Int32Array(this.order.length)
    for (let k = 0; k < order.length; k++) {
      let best = -1
      for (let n = 1; n < tree.size; n++) {
        if (placed[n] || !placed[tree.parent[n]!]) continue
        if (best < 0 || score[n]! > score[best]!) best = n
      }
      order[k] = best
      placed[best] = 1
    }
    if (order.every((n, k) => n === this.order[k])) return false
    this.order = order
    this.choices = Array.from(order, (n) => tree.paths[n]!.split(',').map(Number))
    this.cache.clear()
    this.cache.set(this.choices.length, this.full)
    return true
  }

  /** The tree of the first `k` choices (`0 ≤ k ≤` the number of choices). */
  get(k: number): SubTree {
    let sub = this.cache.get(k)
    if (sub === undefined) {
      const nodes = this.order.slice(0, k).sort().join(',')
      sub = this.built.get(nodes)
      if (sub === undefined) {
        const tree = new MedusaTree(this.choices.slice(0, k))
        const fullNode = Int32Array.from(tree.paths, (key) => this.full.tree.nodeOf.get(key)!)
        sub = { tree, fullNode }
        if (this.built.size >= MAX_BUILT_TREES) this.built.clear()
        this.built.set(nodes, sub)
      }
      this.cache.set(k, sub)
    }
    return sub
  }
}
