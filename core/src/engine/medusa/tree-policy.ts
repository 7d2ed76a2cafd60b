import { headSpacing } from '../row-builder.ts'
import type { SubTree, TreeFamily } from './tree-family.ts'

/** Cost samples forgotten at this rate per step (an effective window of ~50 steps). */
const DECAY = 0.98
/** Steps measured before the policy trusts its cost model; until then the full tree is used. */
const WARMUP_STEPS = 12
/** Warm-up tree sizes cycle through the full tree halved 0..5 times. */
const WARMUP_CYCLE = 6
/** Every this many decisions, one probes a different tree size so the cost slope stays known. */
const PROBE_EVERY = 16

/**
 * Adaptive tree size (`SpeculationOptions.adaptive`): each step, the tree of the family (the first
 * `k` choices in acceptance order, see `TreeFamily`) that maximises expected emitted tokens per
 * unit of step time, or none (plain decoding, `k = 0`) when no tree beats it. Only speed depends on it: every
 * emitted token is still chosen by sample-and-match, so outputs are the same for any tree size.
 *
 * - Acceptance: for every node, how often the walk stood at its parent with the node in the tree
 *   (`tried`) and moved into it (`taken`); `q(n) = (taken + 1) / (tried + 2)`, and the chance of
 *   reaching `n` is the product of `q` along its path. A row of `m` nodes emits
 *   `E(k) = 1 + Σ reach(n)` tokens on average, over the nodes of tree `k` (within the drafts' depth).
 * - Cost: the measured wall time of decode-only steps (plan, runner step, sampling) against their
 *   work `W` = tokens fed + head rows × heads, fitted as `a + b·W` by exponentially forgetting
 *   least squares. A tree row costs its nodes plus `heads` per chain node where heads run
 *   (`headSpacing`), or at one node for greedy-leaf rows; a plain row costs 1: after choosing
 *   plain decoding, rows skip the heads for a stretch that doubles with each consecutive plain
 *   decision, up to `PROBE_EVERY` steps (`wantsHeads`).
 * - Order: the family's nested trees start in the configured list's order; every `PROBE_EVERY`
 *   decisions they are re-ranked by each node's estimated reach (`TreeFamily.reorder`), so the
 *   small trees become the nodes these heads actually get accepted at (a deep chain for accurate
 *   heads, a bushy root for uncertain ones). Untried nodes keep the prior `q = 1/2`, so probes keep
 *   trying them.
 * - Choice, for `B` rows with drafts: `argmax_k B·E(k) / (a + b·B·work(k))` over `0 ≤ k ≤ K`.
 *   Until `WARMUP_STEPS` tree steps were measured, sizes cycle from the full tree down by halves
 *   (the first choice is the full tree); after that every `PROBE_EVERY`-th choice
 *   takes a neighbouring size instead, so the fit keeps seeing different step sizes.
 */
export class AdaptiveTreePolicy {
  private readonly family: TreeFamily
  private readonly tried: Float64Array
  private readonly taken: Float64Array
  private readonly reach: Float64Array
  // Weighted sums of the cost fit: Σw, Σw·x, Σw·y, Σw·x², Σw·x·y.
  private s = 0
  private sx = 0
  private sy = 0
  private sxx = 0
  private sxy = 0
  private treeSteps = 0
  private decisions = 0
  /** The last choice, and the plans since it (while it is plain decoding). */
  private lastChoice = -1
  private idlePlans = 0
  /** Consecutive decisions whose model said plain decoding; the headless stretch doubles with it. */
  private plainStreak = 0

  constructor(family: TreeFamily) {
    this.family = family
    const tree = family.full.tree
    this.tried = new Float64Array(tree.size)
    this.taken = new Float64Array(tree.size)
    this.reach = new Float64Array(tree.size)
  }

  /** The walk stood at `node` of `sub`'s first `treeNodes` nodes and moved to `next` (-1: it stopped). */
  recordChildren(sub: SubTree, node: number, treeNodes: number, next: number): void {
    for (const child of sub.tree.children[node]!) {
      if (child >= treeNodes) break
      const full = sub.fullNode[child]!
      this.tried[full]!++
      if (child === next) this.taken[full]!++
    }
  }

  /**
   * One decode-only step of `work` (see the class comment) took `ms` milliseconds; `tree`: it
   * verified at least one tree. Only tree steps count towards the warm-up: steps of requests
   * without a speculator weigh 1 per row, and a fit made of them alone has no slope to trust.
   */
  recordStep(work: number, ms: number, tree = true): void {
    if (!(ms >= 0) || !(work > 0)) return
    if (tree) this.treeSteps++
    // A step the OS preempted would drag the fit for dozens of steps: cap it at 3× the model.
    const fit = this.treeSteps > WARMUP_STEPS ? this.fit() : null
    if (fit !== null) ms = Math.min(ms, 3 * (fit.a + fit.b * work))
    this.s = this.s * DECAY + 1
    this.sx = this.sx * DECAY + work
    this.sy = this.sy * DECAY + ms
    this.sxx = this.sxx * DECAY + work * work
    this.sxy = this.sxy * DECAY + work * ms
  }

  /**
   * How many choices the step's trees take (0: decode plainly) for `rows` rows whose drafts reach
   * `depth`, with speculators of `heads` heads; `greedyLeaf`: the rows run their heads at one node
   * (`StepRow.medusaLeaf`) rather than along the chain.
   */
  choose(rows: number, depth: number, heads: number, greedyLeaf = false): number {
    if (this.treeSteps >= WARMUP_STEPS && this.decisions % PROBE_EVERY === 0) this.rerank()
    const { order } = this.family
    const full = this.family.full.tree
    const fit = this.fit()
    // While it learns: the full tree, then half of it, a quarter, ... one candidate, and again, so
    // the cost fit sees the whole range of step sizes and the acceptance counts the best nodes.
    if (this.treeSteps < WARMUP_STEPS || fit === null || rows <= 0)
      return Math.max(1, Math.ceil(order.length / 2 ** (this.treeSteps % WARMUP_CYCLE)))
    const { a, b } = fit
    const reach = this.reach
    reach[0] = 1
    let expected = 1
    // Plain decoding runs without heads (see `wantsHeads`); a tree row asks for them at its root.
    let tokens = 1
    let deepest = 0
    let deepestChain = 0
    let best = 0
    let bestRate = rows / (a + b * rows)
    for (let k = 1; k <= order.length; k++) {
      const n = order[k - 1]!
      reach[n] = reach[full.parent[n]!]! * ((this.taken[n]! + 1) / (this.tried[n]! + 2))
      const d = full.depth[n]!
      if (d > depth) continue
      expected += reach[n]!
      tokens++
      deepest = Math.max(deepest, d)
      if (full.headAncestor[n] === n) deepestChain = Math.max(deepestChain, d)
      // Heads run at every `spacing`-th chain node (see `headSpacing`), or at one (greedy leaf).
      const headNodes = greedyLeaf ? 1 : Math.floor(deepestChain / headSpacing(heads, deepest)) + 1
      const work = tokens + heads * headNodes
      const rate = (rows * expected) / (a + b * rows * work)
      if (rate > bestRate) {
        bestRate = rate
        best = k
      }
    }
    this.plainStreak = best === 0 ? this.plainStreak + 1 : 0
    // Back from headless plain decoding (see `wantsHeads`): try the best tree once more.
    if (this.lastChoice === 0 && best === 0) best = 1
    if (++this.decisions % PROBE_EVERY === 0) {
      // Alternate a larger and a smaller neighbour.
      const step = Math.max(1, best >> 1)
      best = (this.decisions / PROBE_EVERY) % 2 === 1 ? Math.min(order.length, best + step) : Math.max(0, best - step)
    }
    this.lastChoice = best
    this.idlePlans = 0
    return best
  }

  /**
   * Whether this step's plain decode rows should ask for head logits (called once per planned
   * step). After a choice of plain decoding they do not, so plain decoding costs what it costs
   * without Medusa; then one step in 2, 4, 8 and at most `PROBE_EVERY` does, doubling with each
   * consecutive plain decision, so a draft exists and the choice is made again with fresh
   * estimates. A young cost model's mistaken "plain" thus costs a step or two, not sixteen.
   */
  wantsHeads(): boolean {
    if (this.lastChoice !== 0) return true
    return ++this.idlePlans % Math.min(PROBE_EVERY, 2 ** this.plainStreak) === 0
  }

  /** Re-rank the family by each node's estimated reach (parents are numbered before children). */
  private rerank(): void {
    const full = this.family.full.tree
    const reach = new Float64Array(full.size)
    reach[0] = 1
    for (let n = 1; n < full.size; n++)
      reach[n] = reach[full.parent[n]!]! * ((this.taken[n]! + 1) / (this.tried[n]! + 2))
    this.family.reorder(reach)
  }

  /** `a + b·W` from the weighted sums, or null while the work values have no spread. */
  private fit(): { a: number; b: number } | null {
    const { s, sx, sy, sxx, sxy } = this
    const variance = s * sxx - sx * sx
    if (s <= 0 || !(variance > 1e-9 * s * sxx)) return null
    const b = Math.max(0, (s * sxy - sx * sy) / variance)
    // A step never costs nothing: keep the fixed part at least a small fraction of the mean.
    const a = Math.max((sy / s) * 0.05, (sy - b * sx) / s)
    return { a, b }
  }
}
