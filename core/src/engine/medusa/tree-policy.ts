import type { Draft } from './draft.ts'
import { StepCosts } from './step-cost.ts'
import type { SubTree, TreeFamily } from './tree-family.ts'

/** Steps measured before the policy trusts its cost model; until then the full tree is used. */
const WARMUP_STEPS = 12
/** Warm-up tree sizes cycle through the full tree halved 0..5 times. */
const WARMUP_CYCLE = 6
/** Every this many decisions of a key, one probes a different tree size so the cost slope stays known. */
const PROBE_EVERY = 16
/** Rows that do not speculate may be slowed this much by the trees of others in their step (noise). */
const PLAIN_SLACK = 0.03
/**
 * Trees must promise this much more than plain decoding's rate (the whole step's, so a group
 * whose gain is a small share of a large batch decodes plainly). Near break-even the estimates'
 * noise (acceptance, fitted costs) picks the side: the demo model's base heads are at break-even
 * on an AVX2 EPYC (a 1-candidate tree at ~1.65x a plain step's cost for ~1.65 tokens), the policy
 * settled on trees in some runs and on plain decoding in others, and the runs with trees served
 * 0.89-0.94x the tokens/s of the server without speculation.
 */
const TREE_MARGIN = 0.05
/**
 * Acceptance evidence fades by this factor per row verified under the key (a window of about 200
 * walks), so a key's estimates follow its traffic (a stretch of loops, a new kind of prompt)
 * instead of freezing after the first thousand steps. Nothing fades while the key decodes plainly.
 */
const ACCEPT_DECAY = 0.995
/** Exploration asks whether a tree could pay with each node's acceptance this many standard deviations higher. */
const OPTIMISM = 1
/**
 * Exploration (a heads step, then a tree step) may cost at most this share of the step-time gain
 * it hopes for: the draftless stretch between tries is the try's predicted cost over this share of
 * the optimistic gain, so a try that costs two plain steps (batch 8) for a 10% gain waits 80.
 */
const EXPLORE_SHARE = 0.25
/**
 * Keys whose trees cannot pay even optimistically still try, as rarely as makes their tries cost
 * this share of plain decoding (1%) together: the cost model may be wrong (a fit from a busy
 * second), and only a tree step tells. The share is the step's, split among the speculating keys
 * in it: three hopeless keys at batch 8 each trying on 1% of the steps cost 3% (measured on the
 * demo model, 2026-11-26: 0.94–0.97× plain with 1% per key).
 */
const FLOOR_SHARE = 0.01
/** Draftless stretches between tries last `PROBE_EVERY` to this many steps per speculating key of the step. */
const MAX_STRETCH = 1024
/** Keys whose acceptance is remembered; the least recently used is forgotten beyond it. */
export const DEFAULT_POLICY_KEYS = 256

/**
 * The rows of one step that speculate with the same drafter for the same adapter: they share a
 * policy key (`speculationKey`) and so acceptance statistics and a tree size.
 */
export interface PolicyGroup {
  /** The (adapter, speculator) key (`speculationKey`). */
  readonly key: string
  /** Rows of the step with a draft under this key. */
  readonly rows: number
  /** Deepest draft among them. */
  readonly depth: number
  /**
   * Medusa heads the rows' speculator has (0: a headless drafter such as prompt lookup); a row
   * runs only as many as its tree's depth needs (`AdaptiveTreePolicy.headsFor`).
   */
  readonly heads: number
}

/**
 * The policy key of a row: its LoRA adapter (or the base model) and what drafts for it (Medusa
 * heads by key, or prompt lookup). Heads trained on one model mispredict for another, so each
 * pair learns its own acceptance (the engine also keeps sampled rows apart from greedy ones).
 */
export function speculationKey(adapterKey: string | null, drafter: string): string {
  return `${adapterKey ?? 'base'}|${drafter}`
}

/**
 * The policy key a row's draft is judged under: its sequence's key (`speculationKey`), and for a
 * prompt-lookup draft the length of the n-gram match it follows. A long match's continuation is
 * accepted far more often than a one-token match's (the demo model's greedy base outputs on the
 * serving bench's prompts: the first candidate after 44% of one-token matches, 67-88% of longer
 * ones), so each length learns its own acceptance and chain depth, plain decoding included.
 */
export function draftKey(seq: KeyedSequence, draft: Draft): string {
  return draft.match > 0 ? lookupKey(seq, draft.match) : seq.policyKey
}

/**
 * The policy key of `seq`'s prompt-lookup drafts that follow an `n`-token match
 * (`<policyKey>|n<n>`), built once per length and kept in `seq.lookupKeys`: a lookup row's plan
 * asks every length's key on every step.
 */
export function lookupKey(seq: KeyedSequence, n: number): string {
  return (seq.lookupKeys[n] ??= `${seq.policyKey}|n${n}`)
}

/** What `draftKey` and `lookupKey` read of a sequence. */
export interface KeyedSequence {
  readonly policyKey: string
  readonly lookupKeys: string[]
}

/** Acceptance statistics and decision state of one key. */
class KeyStats {
  readonly family: TreeFamily
  readonly tried: Float64Array
  readonly taken: Float64Array
  readonly reach: Float64Array
  decisions = 0
  /** The last choice, and the plans since it (while it is plain decoding). */
  lastChoice = -1
  idlePlans = 0
  /** Consecutive decisions whose model said plain decoding; the draftless stretch doubles with it. */
  plainStreak = 0
  /** The shape of the key's last group (heads, draft depth): exploration judges with it. */
  shape: PolicyGroup | null = null
  /**
   * The draftless stretch `wantsDraft` computed for this plain run, and for which step shape (the
   * key's rows and the others): reused until the shape changes, `PROBE_EVERY` plans pass or the
   * key decides again. Recomputing it (a cost fit and an optimistic curve) on every planned step
   * cost ~10 µs per key, as much as 3% of a batch-8 step of the demo model with three keys.
   */
  stretch: { rows: number; otherRows: number; keys: number; since: number; steps: number; hopeful: boolean } | null =
    null

  /**
   * The key's curves as `AdaptiveTreePolicy.curve` last computed them, by estimate (`q`) and
   * optimistic (`qUpper`): reused, since a plan asks for them on every step with drafts.
   */
  readonly meanCurve: { expected: Float64Array; work: Float64Array }
  readonly upperCurve: { expected: Float64Array; work: Float64Array }

  constructor(family: TreeFamily) {
    this.family = family
    const size = family.full.tree.size
    this.tried = new Float64Array(size)
    this.taken = new Float64Array(size)
    this.reach = new Float64Array(size)
    this.meanCurve = { expected: new Float64Array(size), work: new Float64Array(size) }
    this.upperCurve = { expected: new Float64Array(size), work: new Float64Array(size) }
  }

  /** Every node's `tried` and `taken` summed (faded alike): the key's acceptance as a whole. */
  triedAll = 0
  takenAll = 0

  /**
   * `q(n) = (taken + 2·p) / (tried + 2)`: the chance the walk moves into `n` from its parent, with
   * two walks' worth of prior `p`: one half, or the key's acceptance over all its nodes when that
   * is lower. A key whose candidates are rarely accepted (sampled rows: 0.1 on the demo model)
   * thus expects little of the nodes it has not tried either, where a prior of one half made it
   * try trees of 10-26 nodes on them (36 of 90 tree steps in 80 sampled requests, each costing
   * 2.5 plain steps).
   */
  q(n: number): number {
    return this.qWith(n, this.prior())
  }

  /** The prior `p` of `q` (see there): it changes only when evidence is recorded or fades. */
  prior(): number {
    return Math.min(0.5, (this.takenAll + 1) / (this.triedAll + 2))
  }

  /** `q(n)` with the prior given (a curve computes it once for all the family's nodes). */
  qWith(n: number, prior: number): number {
    return (this.taken[n]! + 2 * prior) / (this.tried[n]! + 2)
  }

  /** `q(n)` plus `OPTIMISM` standard deviations of its estimate (at most 1): what the node might be worth. */
  qUpper(n: number, prior: number): number {
    const q = this.qWith(n, prior)
    return Math.min(1, q + OPTIMISM * Math.sqrt((q * (1 - q)) / (this.tried[n]! + 2)))
  }

  /** Let earlier evidence fade (see `ACCEPT_DECAY`) before `rows` more walks are recorded. */
  fade(rows: number): void {
    const f = ACCEPT_DECAY ** rows
    for (let n = 0; n < this.tried.length; n++) {
      this.tried[n]! *= f
      this.taken[n]! *= f
    }
    this.triedAll *= f
    this.takenAll *= f
  }
}

/** Per tree size `k` of a group's family: expected emitted tokens and work per row. */
interface GroupCurve {
  readonly expected: Float64Array
  readonly work: Float64Array
}

/**
 * Adaptive tree size (`SpeculationOptions.adaptive`), per (adapter, speculator) key and per step:
 * each key's rows get the tree of their family (the first `k` choices in acceptance order, see
 * `TreeFamily`) that maximises the whole step's emitted tokens per unit of step time, or none
 * (plain decoding, `k = 0`). Only speed depends on it: every emitted token is still chosen by
 * sample-and-match, so outputs are the same for any tree size.
 *
 * - Acceptance, per key (adapter × drafter), in a bounded LRU (`maxKeys`): for every node, how
 *   often the walk stood at its parent with the node in the tree (`tried`) and moved into it
 *   (`taken`); `q(n) = (taken + 2·p) / (tried + 2)` with prior `p` one half or the key's overall
 *   acceptance if lower (`KeyStats.q`), and the chance of reaching `n` is the product
 *   of `q` along its path. A row of tree `k` emits `E(k) = 1 + Σ reach(n)` tokens on average.
 *   Each key has its own family order, re-ranked every `PROBE_EVERY` of its decisions by each
 *   node's estimated reach (`TreeFamily.reorder`). Adapter traffic thus never changes what base
 *   rows learn, and a key forgotten by the LRU starts again from the prior.
 * - Cost, shared (a step's time is the step's, whoever is in it): the measured wall time of
 *   decode-only steps against their work `W` = tokens fed + head rows × heads, steps with trees
 *   apart from steps without (`StepCosts`; each a line fitted near the `W` asked about, since the
 *   cost is concave in `W`). A tree row costs its nodes plus `heads` (they run once, where its
 *   walk ends); a plain row 1. Trees are judged against plain steps of the same rows, so until
 *   one is measured (a batch size seen only with trees) the step decodes plainly.
 * - Choice, for the whole step: with `P` other decode rows (work `W₀`) and groups `g` of `n_g`
 *   rows, maximise `(P + Σ n_g·E_g(k_g)) / cost(W₀ + Σ n_g·work_g(k_g))` by coordinate ascent
 *   over the groups' sizes, subject to no row being slower than in the all-plain step: a
 *   speculating group needs `E_g(k_g) / cost ≥ 1 / cost₀`, and rows that do not speculate (other
 *   rows, groups at `k = 0`) allow the step to cost at most `PLAIN_SLACK` more than `cost₀`. So a
 *   large batch, where a step costs per token, speculates only where acceptance pays for it.
 *   The best sizes stand only if their rate beats the all-plain step's by `TREE_MARGIN`.
 * - Exploration: until `WARMUP_STEPS` tree steps were measured, sizes cycle from the full tree
 *   down by halves; after that every `PROBE_EVERY`-th decision of a key takes a neighbouring size.
 *   After a plain choice, rows skip drafting (Medusa rows their heads, prompt-lookup rows their
 *   search) for a stretch that doubles with each consecutive plain decision (`wantsDraft`), then
 *   draft once and try the smallest tree.
 *   All exploration beyond plain decoding is paid for only when it might win: a tree for the
 *   step's size must beat plain decoding with every node's acceptance `OPTIMISM` standard
 *   deviations above its estimate (`exploration`), and the stretch between tries is the try's
 *   predicted cost over a share of that optimistic gain (`EXPLORE_SHARE`; when no tree can pay,
 *   `FLOOR_SHARE` of plain decoding split among the step's speculating keys; at most
 *   `MAX_STRETCH` steps per key). At batch 8 on a model whose steps cost per token, where no
 *   tree can pay, each plain key thus asks for heads and tries a small tree once in hundreds of
 *   steps: together they cost what plain decoding costs, within 1%.
 *   Acceptance counts fade per walk (`ACCEPT_DECAY`), so the optimism narrows to recent evidence
 *   without freezing.
 */
export class AdaptiveTreePolicy {
  private readonly maxKeys: number
  /** Insertion order is recency order: a use moves the key to the end. */
  private readonly keys = new Map<string, KeyStats>()
  /** What a decode step costs by its work, with trees and without, as measured (shared: a step's time is the step's). */
  private readonly costs = new StepCosts()
  private treeSteps = 0
  /** Time spent computing draftless stretches since `takeExplorationMs` last asked (see there). */
  private explorationMs = 0

  constructor(maxKeys = DEFAULT_POLICY_KEYS) {
    if (!Number.isInteger(maxKeys) || maxKeys < 1) throw new RangeError('maxKeys must be a positive integer')
    this.maxKeys = maxKeys
  }

  /** Keys whose statistics are held now (at most `maxKeys`). */
  get keyCount(): number {
    return this.keys.size
  }

  /**
   * The tree family of `key` (its own order, re-ranked by its own acceptance), created by `make`
   * when the key is new or was forgotten. Marks the key as recently used.
   */
  family(key: string, make: () => TreeFamily): TreeFamily {
    return this.stats(key, make).family
  }

  /** The walk of a `key` row stood at `node` of `sub`'s first `treeNodes` nodes and moved to `next` (-1: it stopped). */
  recordChildren(key: string, sub: SubTree, node: number, treeNodes: number, next: number): void {
    const stats = this.keys.get(key)
    // Forgotten by the LRU while the step ran: nothing to attribute it to.
    if (stats === undefined) return
    for (const child of sub.tree.children[node]!) {
      if (child >= treeNodes) break
      const full = sub.fullNode[child]!
      stats.tried[full]!++
      stats.triedAll++
      if (child === next) {
        stats.taken[full]!++
        stats.takenAll++
      }
    }
  }

  /**
   * Milliseconds this policy spent since the last call deciding how long plain runs go without
   * drafts (`wantsDraft`'s stretch: an optimistic curve and a cost fit per tree size), then reset.
   * The engine takes it off the step's measured time: the stretch is computed in the first plan
   * of a plain run and then reused, so in steady plain decoding it costs next to nothing, but it
   * falls on exactly the steps that measure plain decoding after a probe (the demo model: ~50 µs
   * on a 165 µs step, which made plain decoding look 1.5x its cost and 1-candidate trees pay).
   */
  takeExplorationMs(): number {
    const ms = this.explorationMs
    this.explorationMs = 0
    return ms
  }

  /**
   * One decode-only step of `rows` rows and `work` (see the class comment) took `ms`
   * milliseconds; `tree`: it verified at least one tree. Only tree steps count towards the warm-up: steps of requests
   * without a speculator weigh 1 per row, and a fit made of them alone has no slope to trust.
   */
  recordStep(work: number, ms: number, tree = true, rows = 1): void {
    if (!(ms >= 0) || !(work > 0)) return
    if (tree) this.treeSteps++
    // A step the OS preempted would drag its bucket for a few steps: past the warm-up, it counts
    // as at most 3× its bucket's mean. (Not 3× the fitted cost: a fit on every step, for a cap
    // that rarely binds, was the largest part of the policy's work on a plain step.)
    this.costs.record(work, ms, tree, rows, this.treeSteps > WARMUP_STEPS ? 3 : Infinity)
  }

  /**
   * How many choices each group's trees take this step (0: decode plainly), in `groups` order.
   * `otherRows` decode rows of the step do not speculate (no drafter, or no draft yet); together
   * they feed `otherWork` (see the class comment). Every group's key must have a family
   * (`family`).
   */
  choose(groups: readonly PolicyGroup[], otherRows = 0, otherWork = otherRows): number[] {
    const stats = groups.map((g) => this.keys.get(g.key))
    if (stats.some((s) => s === undefined)) throw new Error('policy: a group without a family')
    const all = stats as KeyStats[]
    const costs = this.costs
    // While it learns: the full tree, then half of it, a quarter, ... one candidate, and again, so
    // the cost model sees the whole range of step sizes and the acceptance counts the best nodes.
    if (this.treeSteps < WARMUP_STEPS || !costs.ready) {
      return all.map((s) => Math.max(1, Math.ceil(s.family.order.length / 2 ** (this.treeSteps % WARMUP_CYCLE))))
    }
    let rows = otherRows
    for (const g of groups) rows += g.rows
    // No plain step of this many rows measured yet (the warm-up's trees ran at another batch
    // size): decode plainly, without drafts for a stretch (`wantsDraft`), until one is; else trees
    // are judged against a plain cost made of trees, choose trees, and plain steps stay unmeasured
    // (batch 32 of the demo model: trees on 20-30% of the steps, each 1.3-1.7x a plain one).
    if (!costs.plainMeasured(rows)) {
      for (const s of all) {
        s.lastChoice = 0
        s.idlePlans = 0
        s.stretch = null
      }
      return groups.map(() => 0)
    }
    for (const s of all) if (s.decisions % PROBE_EVERY === 0 && s.decisions > 0) this.rerank(s)
    const curves = groups.map((g, i) => this.curve(all[i]!, g))
    const ks = this.bestSizes(groups, curves, costs, otherRows, otherWork)
    return ks.map((k, i) => {
      const s = all[i]!
      const g = groups[i]!
      // Exploration judges the deepest draft the key has had: the last one may have been cut short.
      s.shape = { ...g, depth: Math.max(g.depth, s.shape?.depth ?? 0) }
      // Exploring judges the key's rows against the rest of the step decoding plainly.
      return this.settle(s, g, k, () => this.exploration(s, g, costs, rows - g.rows))
    })
  }

  /**
   * How many of a row's `maxHeads` Medusa heads to run for `key`'s next draft: one level deeper
   * than the tree the key chose last (one head after a plain choice: the try after a draftless
   * stretch is the smallest tree), so a deeper tree can still be chosen and its nodes' acceptance
   * learnt; all of them before the key's first choice (the warm-up cycles from the full tree).
   * Each head costs an LM-head row (on the demo model a fifth of a token's forward), and a
   * 1-candidate tree reads head 0 alone.
   */
  headsFor(key: string, maxHeads: number): number {
    const s = this.keys.get(key)
    if (s === undefined || s.lastChoice < 0) return maxHeads
    return headsForDepth(s.lastChoice === 0 ? 0 : s.family.get(s.lastChoice).tree.maxDepth, maxHeads)
  }

  /**
   * Whether this step's rows of `key` should draft: plain rows with heads run them (their head
   * logits give the next draft), prompt-lookup rows search their tokens (called once per key per
   * planned step; `rows` of the step's decode rows are the key's, `otherRows` are not, and `keys`
   * speculating keys have rows in it, this one included: they share `FLOOR_SHARE`). After a
   * choice of plain decoding they do not, so plain decoding costs what it costs without a drafter.
   * When a tree might pay for a step of this size (see `exploration`), one step in 2, 4, 8, ...
   * does, doubling with each consecutive plain decision up to `PROBE_EVERY` steps for a large
   * optimistic gain and proportionally longer for a small one, so a draft exists and the choice
   * is made again with fresh estimates: a young cost model's mistaken "plain" costs a step or
   * two. When no tree can pay (a large batch on a model whose steps cost per token), one step in
   * hundreds (see `FLOOR_SHARE`).
   */
  wantsDraft(key: string, rows = 1, otherRows = 0, keys = 1): boolean {
    const s = this.keys.get(key)
    if (s === undefined || s.lastChoice !== 0) return true
    let plan = s.stretch
    if (
      plan === null ||
      plan.rows !== rows ||
      plan.otherRows !== otherRows ||
      plan.keys !== keys ||
      s.idlePlans - plan.since >= PROBE_EVERY
    ) {
      const started = performance.now()
      plan = { rows, otherRows, keys, since: s.idlePlans, ...this.draftlessStretch(s, rows, otherRows, keys) }
      s.stretch = plan
      this.explorationMs += performance.now() - started
    }
    // Hoping for nothing: no ramp of short stretches.
    if (!plan.hopeful) return ++s.idlePlans % plan.steps === 0
    // At least one step without a draft, also after a probe's plain choice (streak 0): else the
    // rows run their heads in the very step that chose plain, the next step has a draft again, and
    // no step of the key ever decodes plainly, so plain decoding's cost is never measured, only
    // extrapolated from tree steps (the demo model's base rows, heads only: every step verified a
    // tree of 1-2 candidates, 0.93x plain decoding).
    return ++s.idlePlans % Math.min(plan.steps, 2 ** Math.max(1, s.plainStreak)) === 0
  }

  /**
   * How many plain steps a key's rows go without drafting between tries (see `wantsDraft`), and
   * whether a tree might pay at all (`hopeful`: else no ramp of short stretches).
   */
  private draftlessStretch(
    s: KeyStats,
    rows: number,
    otherRows: number,
    keys: number,
  ): { steps: number; hopeful: boolean } {
    if (!this.costs.ready || s.shape === null) return { steps: PROBE_EVERY, hopeful: true }
    const { gain, cost } = this.exploration(s, { ...s.shape, rows }, this.costs, otherRows)
    // A try may spend EXPLORE_SHARE of what it hopes to win, or its part of FLOOR_SHARE when it
    // hopes for nothing.
    const share = gain > 0 ? EXPLORE_SHARE * gain : FLOOR_SHARE / Math.max(1, keys)
    const longest = MAX_STRETCH * Math.max(1, keys)
    return { steps: Math.min(longest, Math.max(PROBE_EVERY, Math.ceil(cost / share))), hopeful: gain > 0 }
  }

  /**
   * What exploring `g`'s key could win in a step with `otherRows` plain rows: the gain in the
   * step's tokens per ms over all-plain of its best tree size with every node's acceptance
   * optimistic (`KeyStats.qUpper`), under the same fairness bounds as `choose` (0: no tree can
   * pay, whatever the heads' luck); `cost`: what one try (a step with the key's rows
   * running heads, then one with the smallest tree) costs beyond two plain steps, in plain steps.
   */
  private exploration(
    s: KeyStats,
    g: PolicyGroup,
    costs: StepCosts,
    otherRows: number,
  ): { gain: number; cost: number } {
    const { expected, work } = this.curve(s, g, true)
    const rows = otherRows + g.rows
    const cost0 = costs.cost(rows, false, rows)
    const rate0 = (otherRows + g.rows) / cost0
    let gain = 0
    for (let k = 1; k < expected.length; k++) {
      const cost = costs.cost(otherRows + g.rows * work[k]!, true, rows)
      if (otherRows > 0 && cost > cost0 * (1 + PLAIN_SLACK)) continue
      if (expected[k]! * cost0 < cost) continue
      gain = Math.max(gain, (otherRows + g.rows * expected[k]!) / cost / rate0 - 1)
    }
    // The try's heads step follows a plain choice: one head (`headsFor`).
    const headsWork = g.rows * headsForDepth(0, g.heads)
    const extra =
      costs.cost(rows + headsWork, false, rows) + costs.cost(rows + g.rows * (work[1]! - 1), true, rows) - 2 * cost0
    return { gain, cost: extra / cost0 }
  }

  private stats(key: string, make: () => TreeFamily): KeyStats {
    let s = this.keys.get(key)
    if (s !== undefined) {
      this.keys.delete(key)
    } else {
      s = new KeyStats(make())
      if (this.keys.size >= this.maxKeys) this.keys.delete(this.keys.keys().next().value!)
    }
    this.keys.set(key, s)
    return s
  }

  /**
   * `E(k)` and per-row work of every tree size of a group's family (see the class comment), with
   * each node's acceptance estimated (`KeyStats.q`) or, `optimistic`, at its upper bound
   * (`KeyStats.qUpper`). The arrays are the key's own, overwritten by its next curve of that kind.
   */
  private curve(s: KeyStats, g: PolicyGroup, optimistic = false): GroupCurve {
    const { order } = s.family
    const full = s.family.full.tree
    const { expected, work } = optimistic ? s.upperCurve : s.meanCurve
    const reach = s.reach
    const prior = s.prior()
    reach[0] = 1
    expected[0] = 1
    work[0] = 1
    // Plain decoding runs without heads (see `wantsDraft`); a tree row asks for them at its root.
    let e = 1
    let tokens = 1
    let deepest = 0
    for (let k = 1; k <= order.length; k++) {
      const n = order[k - 1]!
      reach[n] = reach[full.parent[n]!]! * (optimistic ? s.qUpper(n, prior) : s.qWith(n, prior))
      const d = full.depth[n]!
      if (d <= g.depth) {
        e += reach[n]!
        tokens++
      }
      deepest = Math.max(deepest, d)
      // The heads run once per row, where its walk ends (`StepRow.medusaSlot`), as many as the
      // next tree of this size may use (`headsFor`).
      expected[k] = e
      work[k] = tokens + headsForDepth(deepest, g.heads)
    }
    return { expected, work }
  }

  /**
   * Coordinate ascent over the groups' sizes for the whole step's rate, within the fairness
   * bounds, from two starts: all plain, and every group at the size best for it alone (a joint
   * move single steps cannot reach when one group's tree alone would slow the other's plain rows).
   * One group alone in its step (batch 1, or every row one key's) needs no ascent: its best size
   * alone is the answer, and is within the bounds (its rate beats plain decoding's).
   */
  private bestSizes(
    groups: readonly PolicyGroup[],
    curves: readonly GroupCurve[],
    fit: StepCosts,
    otherRows: number,
    otherWork: number,
  ): number[] {
    let stepRows = otherRows
    for (const g of groups) stepRows += g.rows
    const alone = curves.map(({ expected, work }, i) => {
      const rows = groups[i]!.rows
      let best = 0
      let bestRate = (rows / fit.cost(rows, false, stepRows)) * (1 + TREE_MARGIN)
      for (let k = 1; k < expected.length; k++) {
        const rate = (rows * expected[k]!) / fit.cost(rows * work[k]!, true, stepRows)
        if (rate > bestRate) {
          bestRate = rate
          best = k
        }
      }
      return best
    })
    if (groups.length === 1 && otherRows === 0) return alone
    let plainWork = otherWork
    for (const g of groups) plainWork += g.rows
    const step = {
      groups,
      curves,
      fit,
      otherRows,
      otherWork,
      rows: stepRows,
      cost0: fit.cost(plainWork, false, stepRows),
    }
    // Every row plain: the step's rows over its plain cost (what stepRate gives for all zeros).
    const plainRate = stepRows / step.cost0
    const fromPlain = ascend(
      step,
      groups.map(() => 0),
    )
    const fromAlone = ascend(step, alone)
    const best = fromAlone.rate > fromPlain.rate ? fromAlone : fromPlain
    return best.rate > plainRate * (1 + TREE_MARGIN) ? best.ks : groups.map(() => 0)
  }

  /**
   * Book-keeping of one key's decision: plain streaks, the retry after draftless plain steps, probes,
   * fading acceptance. `explore` (asked only for a plain choice) says what a tree might win.
   */
  private settle(s: KeyStats, g: PolicyGroup, best: number, explore: () => { gain: number }): number {
    s.plainStreak = best === 0 ? s.plainStreak + 1 : 0
    const chance = best === 0 ? explore() : null
    // Back from a stretch without drafts (see `wantsDraft`): try the smallest tree once (the
    // cheapest try, and it counts the node every larger tree starts with). Prompt lookup too: a
    // key whose first trees ran cold (unoptimised code, ~1 ms per unit of work) or on text with
    // nothing to look up would otherwise keep those estimates and decode plainly for good.
    if (s.lastChoice === 0 && chance !== null) best = 1
    const order = s.family.order.length
    if (++s.decisions % PROBE_EVERY === 0) {
      // Alternate a larger and a smaller neighbour; from plain, larger only where a tree might pay.
      const step = Math.max(1, best >> 1)
      if ((s.decisions / PROBE_EVERY) % 2 === 0) best = Math.max(0, best - step)
      else if (best > 0) best = Math.min(order, best + step)
      else if (chance !== null && chance.gain > 0) best = 1
    }
    if (best > 0) s.fade(g.rows)
    s.lastChoice = best
    s.idlePlans = 0
    s.stretch = null
    return best
  }

  /** Re-rank a key's family by each node's estimated reach (parents are numbered before children). */
  private rerank(s: KeyStats): void {
    const full = s.family.full.tree
    const reach = new Float64Array(full.size)
    reach[0] = 1
    for (let n = 1; n < full.size; n++) reach[n] = reach[full.parent[n]!]! * s.q(n)
    s.family.reorder(reach)
  }
}

/** Heads a row runs (of `maxHeads`; 0 for a headless drafter) when its key's trees reach `depth`: see `headsFor`. */
function headsForDepth(depth: number, maxHeads: number): number {
  return Math.min(maxHeads, depth + 1)
}

/** A step as `bestSizes` optimises it. */
interface StepShape {
  readonly groups: readonly PolicyGroup[]
  readonly curves: readonly GroupCurve[]
  readonly fit: StepCosts
  readonly otherRows: number
  readonly otherWork: number
  /** Rows in the step. */
  readonly rows: number
  /** The step's cost with every row decoding plainly. */
  readonly cost0: number
}

/** The step's tokens per ms with sizes `ks`, or -1 when a row would be slower than plain. */
function stepRate(
  { groups, curves, fit, otherRows, otherWork, rows: stepRows, cost0 }: StepShape,
  ks: readonly number[],
): number {
  let tokens = otherRows
  let work = otherWork
  let plain = otherRows > 0
  let trees = false
  for (let i = 0; i < groups.length; i++) {
    const { rows } = groups[i]!
    tokens += rows * curves[i]!.expected[ks[i]!]!
    work += rows * curves[i]!.work[ks[i]!]!
    if (ks[i] === 0) plain = true
    else trees = true
  }
  const cost = fit.cost(work, trees, stepRows)
  if (plain && cost > cost0 * (1 + PLAIN_SLACK)) return -1
  for (let i = 0; i < groups.length; i++) {
    if (ks[i]! > 0 && curves[i]!.expected[ks[i]!]! * cost0 < cost) return -1
  }
  return tokens / cost
}

/** Coordinate ascent from `ks` (changed in place): each group in turn to its best size, up to 3 passes. */
function ascend(step: StepShape, ks: number[]): { ks: number[]; rate: number } {
  let bestRate = stepRate(step, ks)
  for (let pass = 0; pass < 3; pass++) {
    let changed = false
    for (let i = 0; i < step.groups.length; i++) {
      const current = ks[i]!
      let best = current
      for (let k = 0; k < step.curves[i]!.expected.length; k++) {
        if (k === current) continue
        ks[i] = k
        const rate = stepRate(step, ks)
        if (rate > bestRate) {
          bestRate = rate
          best = k
        }
      }
      ks[i] = best
      if (best !== current) changed = true
    }
    if (!changed) break
  }
  return { ks, rate: bestRate }
}
