/**
 * A bucket's mean forgets at this rate per new sample (a window of ~20 steps of its size); a
 * sample under `RESET_SHARE` of the mean replaces the bucket. A step is never cheaper than its
 * work needs, only slower (a preempted thread, unoptimised code on a cold path, a busy host), so a
 * much faster sample proves the mean came from slow conditions: a bucket measured only while the
 * process was cold (the first tree steps of the demo model ran at ~1 ms per unit of work, 15×
 * their warm cost) is corrected by its first warm sample, not over the dozens its forgetting
 * would take.
 */
const DECAY = 0.95
const RESET_SHARE = 0.5
/** Work buckets per doubling of the step's work. */
const BUCKETS_PER_OCTAVE = 2
/** Least weight of an old bucket in a fit, relative: it still fixes the slope when nothing recent varies. */
const MIN_RECENCY = 1e-6
/** Recency weight of a bucket in a fit, per step since its last sample. */
const RECENCY = 0.98
/** Width of the fit's neighbourhood around the work asked about, in octaves (one standard deviation). */
const BANDWIDTH = 1
/**
 * Fitted costs are reused for this many samples that only move a bucket's mean (a new bucket or a
 * reset refits at once). A plan asks a dozen works, each fit a weighted line with an exponential
 * per bucket: refitting after every step made the policy's choice ~20-50 µs of a 250 µs tree step
 * of the demo model, while a mean that forgets over ~20 samples moves a few percent in eight.
 */
const REFIT_EVERY = 8

interface Bucket {
  /** `floor(log2(work) · BUCKETS_PER_OCTAVE)`: buckets are kept in this order. */
  readonly index: number
  /** Forgetting sums of weight, work and milliseconds. */
  n: number
  w: number
  ms: number
  /** The step of its last sample. */
  at: number
}

/**
 * The buckets' mean points pooled until non-decreasing (see `StepCostModel`), in work order, as
 * flat arrays the fits read: each point's work, mean, `log2(work)` and weight before its distance
 * (`StepCostModel.weight`). Rebuilt in place after each sample, the first time a cost is asked: a
 * plan asks a few dozen costs (every tree size of every group), and pooling into fresh objects,
 * then taking a logarithm and a recency power per point per question, made the fits most of a
 * batch-1 plan of the demo model.
 */
class Shape {
  size = 0
  work: Float64Array = new Float64Array(16)
  ms: Float64Array = new Float64Array(16)
  logWork: Float64Array = new Float64Array(16)
  weight: Float64Array = new Float64Array(16)
  /** Forgetting sample weight and latest sample step of each point (pooling sums and maxes them). */
  n: Float64Array = new Float64Array(16)
  at: Float64Array = new Float64Array(16)
  /** The slope of a line through all the points (0 when they cannot tell one). */
  slope = 0
  /** The cheapest mean: no step is predicted below a twentieth of it. */
  least = 0

  /** Room for `size` points. */
  reserve(size: number): void {
    if (size <= this.work.length) return
    const grow = (a: Float64Array): Float64Array => {
      const b = new Float64Array(2 * size)
      b.set(a)
      return b
    }
    this.work = grow(this.work)
    this.ms = grow(this.ms)
    this.logWork = grow(this.logWork)
    this.weight = grow(this.weight)
    this.n = grow(this.n)
    this.at = grow(this.at)
  }
}

/**
 * What a decode step costs in milliseconds, by its work `W` (tokens fed + head rows × heads), as
 * measured: steps are grouped in work buckets (half octaves of `W`), each keeping a forgetting
 * mean (see `DECAY`), made non-decreasing in `W` (adjacent buckets pooled: more work never costs
 * less, and noise must not make a larger tree look cheaper). The cost of a work `W` is a line
 * fitted through the buckets' means near it: weighted least squares, each bucket weighing its
 * samples, how recently it had one (`RECENCY`), and a Gaussian of its distance from `W` in octaves
 * (`BANDWIDTH`). Where the buckets near `W` cannot tell a slope, the slope of all of them serves.
 *
 * Why not one line `a + b·W` for all sizes: a step's cost is concave in its work on a CPU (a
 * plain batch-1 step of the demo model reads every weight for one token, 0.35 ms; four more
 * tokens add 0.15 ms; twenty-five add 1.6 ms). One line through both ends put a plain step at
 * 0.66 ms and made a 4-token tree look like a 1.4× gain where it was a loss. And not straight
 * lines between neighbouring buckets either: at batch 32 two buckets' noise made eight more
 * tokens look a third as costly as they are, and every row paid for the trees that chose.
 */
export class StepCostModel {
  /**
   * How the means are made non-decreasing in work: `pool` adjacent violators (the default), or
   * `lower` a size's mean above a larger size's to it (a step is only ever slowed by what is not
   * its work, see `DECAY`). Plain steps lower: their work is their rows (and heads), and at batch
   * 32 the few steps of 17-31 rows, run while requests came and went, cost 1.3-1.6x the 32-row
   * step; pooled with it they raised its cost by a fifth, against which trees looked cheap.
   */
  private readonly monotone: 'pool' | 'lower'
  /** Measured buckets in `index` order (a handful: half octaves of the works seen). */
  private readonly buckets: Bucket[] = []
  private steps = 0
  /** The pooled means and the slope of all of them (see `Shape`); `stale` until pooled after the memo was cleared. */
  private readonly shape = new Shape()
  private stale = true
  /** Costs fitted since the last refit, by work (a step's plan asks the same few works many times). */
  private readonly memo = new Map<number, number>()
  /** The step count when the memo's fits began (see `REFIT_EVERY`). */
  private memoSince = 0

  constructor(monotone: 'pool' | 'lower' = 'pool') {
    this.monotone = monotone
  }

  /**
   * One decode step of `work` took `ms` milliseconds; counted as at most `capRatio` times its
   * bucket's mean (a step the OS preempted would otherwise drag its bucket for a few steps).
   */
  record(work: number, ms: number, capRatio = Infinity): void {
    if (!(ms >= 0) || !(work > 0)) return
    const index = bucketIndex(work)
    let at = 0
    while (at < this.buckets.length && this.buckets[at]!.index < index) at++
    let bucket = this.buckets[at]
    if (bucket === undefined || bucket.index !== index) {
      bucket = { index, n: 0, w: 0, ms: 0, at: 0 }
      this.buckets.splice(at, 0, bucket)
    }
    const mean = bucket.ms / bucket.n
    if (bucket.n > 0) ms = Math.min(ms, capRatio * mean)
    const decay = !(bucket.n > 0) || ms < RESET_SHARE * mean ? 0 : DECAY
    bucket.at = ++this.steps
    bucket.n = bucket.n * decay + 1
    bucket.w = bucket.w * decay + work
    bucket.ms = bucket.ms * decay + ms
    // A new or reset bucket changes the shape: refit at once; a moved mean waits for REFIT_EVERY.
    // The memo and the pooled shape are one snapshot, so every cost of a window (a work first
    // asked late in it too) comes from the same fit.
    if (decay === 0 || this.steps - this.memoSince >= REFIT_EVERY) {
      this.memo.clear()
      this.stale = true
    }
  }

  /** Whether costs can be told apart by work: at least two buckets measured. */
  get ready(): boolean {
    return this.buckets.length >= 2
  }

  /** Whether steps of about `work` (its bucket) were measured: `cost` answers there even before `ready`. */
  measuredAt(work: number): boolean {
    const index = bucketIndex(work)
    return this.buckets.some((b) => b.index === index)
  }

  /** The predicted milliseconds of a step of `work` (see the class comment); needs `ready`, or `measuredAt(work)`. */
  cost(work: number): number {
    let ms = this.memo.get(work)
    if (ms === undefined) {
      if (this.memo.size === 0) this.memoSince = this.steps
      ms = this.fitAt(work)
      this.memo.set(work, ms)
    }
    return ms
  }

  private fitAt(work: number): number {
    if (this.stale) this.pool()
    const shape = this.shape
    const near = weightedLine(shape, Math.log2(work))
    const slope = Number.isFinite(near.slope) ? Math.max(0, near.slope) : shape.slope
    // A step never costs nothing: below every measured size, at least a twentieth of the cheapest.
    return Math.max(0.05 * shape.least, near.y + slope * (work - near.x))
  }

  /** A point's weight in a fit before its distance: its samples, fading with the steps since its last. */
  private weight(n: number, at: number): number {
    return n * Math.max(MIN_RECENCY, RECENCY ** (this.steps - at))
  }

  /** The buckets' means in work order, pooled (or lowered) until non-decreasing, and the slope of a line through all of them. */
  private pool(): void {
    const shape = this.shape
    shape.reserve(this.buckets.length)
    const { work, ms, n, at } = shape
    let size = 0
    const pool = this.monotone === 'pool'
    for (const bucket of this.buckets) {
      let pw = bucket.w / bucket.n
      let pms = bucket.ms / bucket.n
      let pn = bucket.n
      let pat = bucket.at
      // Pool adjacent violators: a mean below the one before it merges with it.
      while (pool && size > 0 && ms[size - 1]! >= pms) {
        const q = --size
        const weight = n[q]! + pn
        pw = (work[q]! * n[q]! + pw * pn) / weight
        pms = (ms[q]! * n[q]! + pms * pn) / weight
        pn = weight
        pat = Math.max(at[q]!, pat)
      }
      work[size] = pw
      ms[size] = pms
      n[size] = pn
      at[size] = pat
      size++
    }
    // Or lower: a mean above a larger size's is lowered to it (see `monotone`).
    if (!pool) for (let i = size - 2; i >= 0; i--) ms[i] = Math.min(ms[i]!, ms[i + 1]!)
    shape.size = size
    let least = Infinity
    for (let i = 0; i < size; i++) {
      shape.logWork[i] = Math.log2(work[i]!)
      shape.weight[i] = this.weight(n[i]!, at[i]!)
      least = Math.min(least, ms[i]!)
    }
    shape.least = least
    const { slope } = weightedLine(shape, null, 1e-12)
    shape.slope = Number.isFinite(slope) ? Math.max(0, slope) : 0
    this.stale = false
  }
}

/**
 * The weighted least-squares line through the shape's points (work → ms): its weighted mean point
 * and its slope, NaN where the works have no spread (variance under `minSpread` relative). Each
 * point weighs its `weight`, times a Gaussian of its distance from `2^logAt` in octaves
 * (`BANDWIDTH`) when `logAt` is given.
 */
function weightedLine(shape: Shape, logAt: number | null, minSpread = 1e-9): { x: number; y: number; slope: number } {
  const { work, ms, logWork, weight: pointWeight } = shape
  let s = 0
  let sx = 0
  let sy = 0
  let sxx = 0
  let sxy = 0
  for (let i = 0; i < shape.size; i++) {
    let weight = pointWeight[i]!
    if (logAt !== null) {
      const octaves = (logWork[i]! - logAt) / BANDWIDTH
      weight *= Math.exp(-0.5 * octaves * octaves)
    }
    const x = work[i]!
    const y = ms[i]!
    s += weight
    sx += weight * x
    sy += weight * y
    sxx += weight * x * x
    sxy += weight * x * y
  }
  const variance = s * sxx - sx * sx
  const slope = variance > minSpread * s * sxx ? (s * sxy - sx * sy) / variance : Number.NaN
  return { x: sx / s, y: sy / s, slope }
}

/**
 * Step costs kept apart by what the work count misses: whether the step verifies trees, and how
 * many rows it has. A tree costs more than its tokens (its rows' masks, a sample per node, the
 * walk, the cache compaction), and a row more than its token (its own cache to attend to, its
 * sampling, its share of the engine's book-keeping). At batch 32 a tree of one or two candidates
 * adds one or two units of work to 32, inside the same work bucket as the plain steps around it
 * and as a lone row's 26-node tree: one model read its cost off those and judged such trees
 * nearly free (0.85× plain decoding in the serving bench, trees on most steps). Each (kind, rows
 * class) answers from its own steps once it has two buckets (plain steps also at a size they
 * measured, see `cost`), else the rows class's steps of both kinds, else all steps; and a tree
 * step is never predicted below its rows decoding plainly.
 */
export class StepCosts {
  private readonly all = new StepCostModel()
  /** Per rows class (`ROW_CLASSES`): both kinds, plain steps, tree steps. */
  private readonly classes = ROW_CLASSES.map(() => ({
    both: new StepCostModel(),
    plain: new StepCostModel('lower'),
    tree: new StepCostModel(),
  }))

  /**
   * One decode step of `rows` rows and `work` took `ms` milliseconds; `tree`: it verified at least
   * one tree. Each model counts it as at most `capRatio` times the mean of its bucket there.
   */
  record(work: number, ms: number, tree: boolean, rows: number, capRatio = Infinity): void {
    this.all.record(work, ms, capRatio)
    const c = this.classes[rowClass(rows)]!
    c.both.record(work, ms, capRatio)
    ;(tree ? c.tree : c.plain).record(work, ms, capRatio)
  }

  /** Whether costs can be told apart by work (see `StepCostModel.ready`). */
  get ready(): boolean {
    return this.all.ready
  }

  /**
   * The predicted milliseconds of a step of `rows` rows and `work` that verifies trees (`tree`) or
   * none; needs `ready`. A tree step is never predicted cheaper than its rows decoding plainly
   * (one unit of work each): at a large batch a rows class's tree model is made of the few tries
   * it gets, and its line, extended below them, put trees of 1-3 more units at 0.2-1.0x the plain
   * step of the same rows (batch 32 of the demo model), where they measured 1.1-1.3x. The floor is
   * the plain model at the rows' own work, where plain steps are measured: extended to the tree's
   * work instead, a slope from a few sporadic head steps made batch-1 trees look dearer than they
   * are (kjv's sequential greedy speed-up 1.44-1.47x fell to 0.92-1.28x).
   */
  cost(work: number, tree: boolean, rows: number): number {
    const c = this.classes[rowClass(rows)]!
    // Plain steps of a large batch are mostly of one size, so its plain model is seldom `ready`;
    // where it has measured the size asked about, it answers (the model of both kinds, its trees
    // included, made the 32-row plain step look as dear as a tree).
    if (!tree)
      return (c.plain.ready || c.plain.measuredAt(work) ? c.plain : c.both.ready ? c.both : this.all).cost(work)
    const own = (c.tree.ready ? c.tree : c.both.ready ? c.both : this.all).cost(work)
    return Math.max(own, this.cost(rows, false, rows))
  }

  /** Whether plain steps of `rows` rows (one unit of work each) were measured: until they are, trees there cannot be judged. */
  plainMeasured(rows: number): boolean {
    return this.classes[rowClass(rows)]!.plain.measuredAt(rows)
  }
}

/** A work's bucket (see `Bucket.index`). */
function bucketIndex(work: number): number {
  return Math.floor(Math.log2(work) * BUCKETS_PER_OCTAVE)
}

/** Upper bounds of the rows classes: alone, a few, a batch, a big batch. */
const ROW_CLASSES = [1, 4, 16, Infinity] as const

function rowClass(rows: number): number {
  let c = 0
  while (rows > ROW_CLASSES[c]!) c++
  return c
}
