import t from 'tap'
import { StepCostModel, StepCosts } from '../../src/engine/medusa/step-cost.ts'

/** Record `n` steps of `work` costing `ms` each. */
function feed(model: StepCostModel, work: number, ms: number, n = 20): void {
  for (let i = 0; i < n; i++) model.record(work, ms)
}

t.test('a line fitted near the work asked about: concave costs stay concave', async (t) => {
  // The demo model on the cpu: a plain step 0.35 ms, five tokens 0.5 ms, twenty-six 2 ms.
  const model = new StepCostModel()
  t.notOk(model.ready, 'nothing measured: not ready')
  feed(model, 1, 0.35)
  t.notOk(model.ready, 'one work size: not ready')
  feed(model, 5, 0.5)
  feed(model, 26, 2)
  t.ok(model.ready)
  const within = (w: number, ms: number, tolerance: number): void => {
    t.ok(Math.abs(model.cost(w) - ms) <= tolerance, `work ${w}: ${model.cost(w).toFixed(3)} ms, measured ${ms}`)
  }
  // One least-squares line through these three means puts a plain step near 0.2 ms and makes
  // the first extra tokens cost 0.07 ms each: a small tree's gain would be misjudged.
  within(1, 0.35, 0.01)
  within(5, 0.5, 0.02)
  within(26, 2, 0.05)
  t.ok(model.cost(3) > 0.35 && model.cost(3) < 0.5, 'between two sizes: between their costs')
  t.ok(model.cost(2) - model.cost(1) < 0.05, 'the first extra token costs what small steps say (not 0.07 ms)')
  t.ok(model.cost(40) > 2, 'past the largest size: extended upwards')
  t.ok(model.cost(0.5) > 0 && model.cost(0.5) <= 0.35, 'below the smallest: extended down, above zero')
})

t.test('the slope near a busy size comes from its neighbourhood, not from two noisy buckets', async (t) => {
  // Batch 32: plain steps every time (±5% noise), trees of 4 or 8 more tokens now and then, and
  // a batch of 16 rarely; every step costs 0.8 ms + 0.12 ms per unit of work.
  const model = new StepCostModel()
  const line = (w: number): number => 0.8 + 0.12 * w
  for (let i = 0; i < 400; i++) {
    model.record(32, line(32) * (1 + 0.05 * Math.sin(i)))
    if (i % 20 === 0) model.record(i % 40 === 0 ? 40 : 36, line(i % 40 === 0 ? 40 : 36))
    if (i % 50 === 0) model.record(16, line(16))
  }
  const perToken = (model.cost(40) - model.cost(32)) / 8
  t.ok(Math.abs(perToken - 0.12) < 0.02, `eight more tokens at batch 32: ${perToken.toFixed(3)} ms each (0.12)`)
})

t.test('more work never costs less: noisy means are pooled', async (t) => {
  const model = new StepCostModel()
  feed(model, 1, 0.35)
  feed(model, 4, 1.0)
  feed(model, 8, 0.8) // noise: a larger step measured cheaper
  feed(model, 16, 1.6)
  const costs = [1, 2, 4, 6, 8, 12, 16, 24].map((w) => model.cost(w))
  t.ok(
    costs.every((c, i) => i === 0 || c >= costs[i - 1]!),
    `non-decreasing in work (${costs.map((c) => c.toFixed(3)).join(' ')})`,
  )
})

t.test('a bucket measured cold is corrected by its first warm samples', async (t) => {
  const model = new StepCostModel()
  feed(model, 1, 0.35, 50)
  // The first tree steps of a process run unoptimised code: 1 ms per unit of work.
  feed(model, 4, 4, 3)
  t.ok(Math.abs(model.cost(4) - 4) < 1e-9)
  model.record(4, 0.5)
  t.ok(Math.abs(model.cost(4) - 0.5) < 1e-9, 'a sample under half the mean replaces it')
  // Within a factor of two, samples are averaged (with forgetting).
  for (let i = 0; i < 40; i++) model.record(4, i % 2 === 0 ? 0.5 : 0.7)
  t.ok(Math.abs(model.cost(4) - 0.6) < 0.01, `alternating 0.5 and 0.7 ms: about 0.6 (${model.cost(4).toFixed(3)})`)
  // A preempted step is 4× slow: it moves the mean by a twentieth of that.
  model.record(4, 2.4)
  t.ok(model.cost(4) < 0.75, `one slow outlier moves the mean a little (${model.cost(4).toFixed(3)})`)
})

t.test('a sample past the cap counts as the cap', async (t) => {
  const capped = new StepCostModel()
  const free = new StepCostModel()
  feed(capped, 4, 0.5, 20)
  feed(free, 4, 0.5, 20)
  capped.record(4, 50, 3) // a preempted step, 100× slow
  free.record(4, 50)
  // Counted as 1.5 ms: the forgetting mean of ~13 samples at 0.5 moves to (0.95·12.83·0.5 + 1.5) / 13.19.
  t.ok(Math.abs(capped.cost(4) - 0.5758) < 0.001, `counted as 3× the mean: ${capped.cost(4).toFixed(4)} ms`)
  t.ok(free.cost(4) > 2, `uncapped, it drags the bucket (${free.cost(4).toFixed(3)} ms)`)
  capped.record(8, 50, 3)
  t.ok(capped.cost(8) > 2, 'the first sample of a bucket has no mean to cap it by')
})

t.test('nonsense samples are ignored', async (t) => {
  const model = new StepCostModel()
  model.record(0, 1)
  model.record(3, Number.NaN)
  model.record(3, -1)
  t.notOk(model.ready)
})

t.test('fitted costs are reused until a bucket is new or reset, or eight samples moved the means', async (t) => {
  const model = new StepCostModel()
  feed(model, 1, 0.35)
  feed(model, 4, 0.5)
  const before = model.cost(4)
  t.ok(Math.abs(before - 0.5) < 1e-9)
  // Samples that only move the mean: the plan's fits stand for up to REFIT_EVERY (8) of them.
  for (let i = 0; i < 7; i++) model.record(4, 0.6)
  t.equal(model.cost(4), before, 'seven samples later: the same fit')
  model.record(4, 0.6)
  t.ok(model.cost(4) > 0.52, `the eighth refits: ${model.cost(4).toFixed(3)} ms`)
  // A new bucket changes the shape: refit at once.
  const mid = model.cost(8)
  model.record(8, 5)
  t.not(model.cost(8), mid, 'a first sample of work 8 is used at once')
  // A sample under half its bucket's mean replaces it (a cold bucket): refit at once.
  model.record(8, 0.7)
  t.ok(Math.abs(model.cost(8) - 0.7) < 0.05, `a reset is used at once (${model.cost(8).toFixed(3)} ms)`)
})

t.test('a tree step is never predicted cheaper than its rows decoding plainly', async (t) => {
  // Batch 32: plain steps of 17-32 rows (0.5 ms + 0.12 ms a row), and a rows class's only tree
  // steps two tries of 12 and 14 more units whose times a busy second skewed (5.5 and 7.5 ms):
  // their own line, extended down to a tree of two more units, falls below the plain step of 32 rows.
  const costs = new StepCosts()
  for (let i = 0; i < 200; i++) {
    const rows = i % 10 === 0 ? 17 + (i % 16) : 32
    costs.record(rows, 0.5 + 0.12 * rows, false, rows)
  }
  for (let i = 0; i < 3; i++) {
    costs.record(44, 5.5, true, 32)
    costs.record(46, 7.5, true, 32)
  }
  const plain = costs.cost(32, false, 32)
  const tree = costs.cost(34, true, 32)
  t.ok(tree >= plain, `two more units in a tree: ${tree.toFixed(3)} ms, the 32 rows plain ${plain.toFixed(3)} ms`)
  t.ok(
    Math.abs(costs.cost(46, true, 32) - 7.5) < 0.5,
    `where trees were measured, their own cost: ${costs.cost(46, true, 32).toFixed(3)}`,
  )
  // Batch 1: plain steps 0.17 ms, a few sporadic head steps (cold: 0.35 ms for one head) and
  // steady trees of 3-6 units at 0.22-0.3 ms. The plain line through the head steps, extended to
  // 6 units, says ~1 ms; the trees' own cost stands.
  const alone = new StepCosts()
  for (let i = 0; i < 200; i++) {
    if (i % 40 === 0) alone.record(2, 0.35, false, 1)
    else if (i % 2 === 0) alone.record(1, 0.17, false, 1)
    else alone.record(3 + (i % 4), 0.2 + 0.02 * (i % 4), true, 1)
  }
  t.ok(alone.cost(6, false, 1) > 0.6, `the plain line extended: ${alone.cost(6, false, 1).toFixed(3)} ms`)
  t.ok(Math.abs(alone.cost(6, true, 1) - 0.26) < 0.03, `a tree of 6 units: ${alone.cost(6, true, 1).toFixed(3)} ms`)
})

t.test('plain steps: a smaller batch measured slower lowers to the larger, it does not raise it', async (t) => {
  // Batch 32 of the demo model: 32-row plain steps 3.5 ms; now and then steps of 20-28 rows,
  // slow (6 ms) as requests come and go around them. Pooled, they made the 32-row step ~4.3 ms.
  const costs = new StepCosts()
  for (let i = 0; i < 200; i++) {
    if (i % 20 === 0) costs.record(20 + (i % 9), 6, false, 20 + (i % 9))
    costs.record(32, 3.5, false, 32)
  }
  const at32 = costs.cost(32, false, 32)
  t.ok(Math.abs(at32 - 3.5) < 0.05, `the 32-row plain step: ${at32.toFixed(3)} ms (measured 3.5)`)
  t.ok(costs.cost(24, false, 24) <= at32 + 1e-9, 'fewer rows never cost more')
})

t.test('plain costs of one measured size answer there; elsewhere the other models do', async (t) => {
  // Batch 8, never a plain step of 8 rows, only 8 rows running heads (40 units) plainly, and trees.
  const costs = new StepCosts()
  for (let i = 0; i < 50; i++) {
    costs.record(40, 2, false, 8)
    costs.record(48, 2.4, true, 8)
  }
  t.ok(Math.abs(costs.cost(40, false, 8) - 2) < 0.01, 'where plain steps were measured: their cost')
  t.ok(
    costs.cost(8, false, 8) < 1.5,
    `8 rows without heads: not the heads step's 2 ms (${costs.cost(8, false, 8).toFixed(3)})`,
  )
  t.notOk(costs.plainMeasured(8), 'no plain step of 8 units measured')
  costs.record(8, 0.6, false, 8)
  t.ok(costs.plainMeasured(8), 'now it is')
})
