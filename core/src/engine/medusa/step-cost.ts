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

interface Bucket {
  /** Forgetting sums of weight, work and milliseconds. */
  n: number
  w: number
  ms: number
  /** The step of its last sample. */
  at: number
}

/** A bucket's mean point, pooled with its neighbours where the means are not monotone. */
interface Point {
  work: number
  ms: number
  /** Forgetting sample weight. */
  n: number
  /** The step of its (latest) last sample. */
  at: number
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
  private readonly buckets = new Map<number, Bucket>()
  private steps = 0
  /** The pooled means and the slope of all of them, or null while stale. */
  private shape: { points: Point[]; slope: number } | null = null
  /** Costs asked since the last sample, by work (a step's plan asks the same few works many times). */
  private readonly memo = new Map<number, number>()

  /** One decode step of `work` took `ms` milliseconds. */
  record(work: number, ms: number): void {
    if (!(ms >= 0) || !(work > 0)) return
    const index = Math.floor(Math.log2(work) * BUCKETS_PER_OCTAVE)
    let bucket = this.buckets.get(index)
    if (bucket === undefined) this.buckets.set(index, (bucket = { n: 0, w: 0, ms: 0, at: 0 }))
    const mean = bucket.ms / bucket.n
    const decay = !(bucket.n > 0) || ms < RESET_SHARE * mean ? 0 : DECAY
    bucket.at = ++this.steps
    bucket.n = bucket.n * decay + 1
    bucket.w = bucket.w * decay + work
    bucket.ms = bucket.ms * decay + ms
    this.shape = null
    this.memo.clear()
  }

  /** Whether costs can be told apart by work: at least two buckets measured. */
  get ready(): boolean {
    return this.buckets.size >= 2
  }

  /** The predicted milliseconds of a step of `work` (see the class comment); needs `ready`. */
  cost(work: number): number {
    let ms = this.memo.get(work)
    if (ms === undefined) {
      ms = this.fitAt(work)
      this.memo.set(work, ms)
    }
    return ms
  }

  private fitAt(work: number): number {
    const { points, slope: overall } = (this.shape ??= this.pool())
    const near = weightedLine(
      points,
      (p) => {
        const octaves = Math.log2(p.work / work) / BANDWIDTH
        return this.weight(p) * Math.exp(-0.5 * octaves * octaves)
      },
      1e-9,
    )
    const slope = Number.isFinite(near.slope) ? Math.max(0, near.slope) : overall
    let least = Infinity
    for (const p of points) least = Math.min(least, p.ms)
    // A step never costs nothing: below every measured size, at least a twentieth of the cheapest.
    return Math.max(0.05 * least, near.y + slope * (work - near.x))
  }

  /** A point's weight in a fit before its distance: its samples, fading with the steps since its last. */
  private weight(p: Point): number {
    return p.n * Math.max(MIN_RECENCY, RECENCY ** (this.steps - p.at))
  }

  /** The buckets' means in work order, pooled until non-decreasing, and the slope of a line through all of them. */
  private pool(): { points: Point[]; slope: number } {
    const sorted = [...this.buckets.entries()].sort(([a], [b]) => a - b).map(([, bucket]) => bucket)
    const points: Point[] = []
    for (const { n, w, ms, at } of sorted) {
      let p: Point = { work: w / n, ms: ms / n, n, at }
      // Pool adjacent violators: a mean below the one before it merges with it.
      while (points.length > 0 && points.at(-1)!.ms >= p.ms) {
        const q = points.pop()!
        const weight = q.n + p.n
        p = {
          work: (q.work * q.n + p.work * p.n) / weight,
          ms: (q.ms * q.n + p.ms * p.n) / weight,
          n: weight,
          at: Math.max(q.at, p.at),
        }
      }
      points.push(p)
    }
    const { slope } = weightedLine(points, (p) => this.weight(p), 1e-12)
    return { points, slope: Number.isFinite(slope) ? Math.max(0, slope) : 0 }
  }
}

/**
 * The weighted least-squares line through `points` (work → ms): its weighted mean point and its
 * slope, NaN where the works have no spread (variance under `minSpread` relative).
 */
function weightedLine(
  points: readonly Point[],
  weightOf: (p: Point) => number,
  minSpread: number,
): { x: number; y: number; slope: number } {
  let s = 0
  let sx = 0
  let sy = 0
  let sxx = 0
  let sxy = 0
  for (const p of points) {
    const weight = weightOf(p)
    s += weight
    sx += weight * p.work
    sy += weight * p.ms
    sxx += weight * p.work * p.work
    sxy += weight * p.work * p.ms
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
 * class) answers from its own steps once it has two buckets, else the rows class's steps of
 * both kinds, else all steps.
 */
export class StepCosts {
  private readonly all = new StepCostModel()
  /** Per rows class (`ROW_CLASSES`): both kinds, plain steps, tree steps. */
  private readonly classes = ROW_CLASSES.map(() => ({
    both: new StepCostModel(),
    plain: new StepCostModel(),
    tree: new StepCostModel(),
  }))

  /** One decode step of `rows` rows and `work` took `ms` milliseconds; `tree`: it verified at least one tree. */
  record(work: number, ms: number, tree: boolean, rows: number): void {
    this.all.record(work, ms)
    const c = this.classes[rowClass(rows)]!
    c.both.record(work, ms)
    ;(tree ? c.tree : c.plain).record(work, ms)
  }

  /** Whether costs can be told apart by work (see `StepCostModel.ready`). */
  get ready(): boolean {
    return this.all.ready
  }

  /** The predicted milliseconds of a step of `rows` rows and `work` that verifies trees (`tree`) or none; needs `ready`. */
  cost(work: number, tree: boolean, rows: number): number {
    const c = this.classes[rowClass(rows)]!
    const kind = tree ? c.tree : c.plain
    return (kind.ready ? kind : c.both.ready ? c.both : this.all).cost(work)
  }
}

/** Upper bounds of the rows classes: alone, a few, a batch, a big batch. */
const ROW_CLASSES = [1, 4, 16, Infinity] as const

function rowClass(rows: number): number {
  let c = 0
  while (rows > ROW_CLASSES[c]!) c++
  return c
}
