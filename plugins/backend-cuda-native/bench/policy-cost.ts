/**
 * What the adaptive speculation policy costs the JS thread per planned step (issue 17): the
 * engine asks `AdaptiveTreePolicy.choose` once per decode step with drafts and records the step's
 * time afterwards, so both sit between two runner steps of every speculating batch. This runs that
 * loop alone on a synthetic but steady workload — Medusa's default tree, every candidate accepted
 * with chance one half, a step costing 0.35 ms plus 0.03 ms per unit of work (±10%, the demo
 * model's shape on the cpu) — and prints microseconds per decision and the mean tree size chosen
 * (which must not move when only the policy's speed changes): at batch 1 (one key, one row) and at
 * batch 8 (three keys of two rows each beside two plain rows, the serving bench's mix).
 *
 * Run: `npx tsx plugins/backend-cuda-native/bench/policy-cost.ts [decisions per round, default 5000]`
 * from the repository root. The policy is a core internal: this dev tool imports it by path, like
 * speculation-serving.ts does.
 */
import { DEFAULT_MEDUSA_CHOICES, MedusaTree } from '../../../core/src/engine/medusa/medusa-tree.ts'
import type { PolicyGroup } from '../../../core/src/engine/medusa/tree-policy.ts'
import { AdaptiveTreePolicy } from '../../../core/src/engine/medusa/tree-policy.ts'
import { TreeFamily } from '../../../core/src/engine/medusa/tree-family.ts'

const HEADS = 4
const ROUNDS = 5
const WARMUP = 3000

/** A seeded uniform [0, 1) stream (a linear congruential generator: the bench needs only repeatability). */
function stream(seed: number): () => number {
  let s = seed
  return () => {
    s = (Math.imul(s, 1103515245) + 12345) & 0x7fffffff
    return s / 0x80000000
  }
}

/** One configuration: `keys` groups of `rowsPerKey` rows beside `otherRows` plain rows. */
function measure(name: string, keys: number, rowsPerKey: number, otherRows: number, decisions: number): void {
  const policy = new AdaptiveTreePolicy()
  const random = stream(1)
  const groups: PolicyGroup[] = []
  const families: TreeFamily[] = []
  for (let k = 0; k < keys; k++) {
    const key = `adapter-${k}|medusa`
    families.push(
      policy.family(key, () => new TreeFamily(new MedusaTree(DEFAULT_MEDUSA_CHOICES), DEFAULT_MEDUSA_CHOICES)),
    )
    groups.push({ key, rows: rowsPerKey, depth: HEADS, heads: HEADS })
  }
  /** One planned step: the choice, each row's walk (accepting each candidate with chance 1/2), the step's time. */
  const step = (): number => {
    const sizes = policy.choose(groups, otherRows)
    let work = otherRows
    let trees = false
    let chosen = 0
    sizes.forEach((size, g) => {
      chosen += size
      if (size === 0) {
        work += rowsPerKey
        return
      }
      trees = true
      const sub = families[g]!.get(size)
      const nodes = sub.tree.size
      work += rowsPerKey * (nodes + HEADS)
      for (let r = 0; r < rowsPerKey; r++) {
        for (let n = 0; ;) {
          const children = sub.tree.children[n]!.filter((c) => c < nodes)
          const next = children.find(() => random() < 0.5) ?? -1
          policy.recordChildren(groups[g]!.key, sub, n, nodes, next)
          if (next < 0) break
          n = next
        }
      }
    })
    policy.recordStep(work, (0.35 + 0.03 * work) * (0.9 + 0.2 * random()), trees, keys * rowsPerKey + otherRows)
    return chosen / keys
  }
  for (let i = 0; i < WARMUP; i++) step()
  const times: number[] = []
  let sizeSum = 0
  for (let round = 0; round < ROUNDS; round++) {
    const start = performance.now()
    for (let i = 0; i < decisions; i++) sizeSum += step()
    times.push(((performance.now() - start) / decisions) * 1000)
  }
  times.sort((a, b) => a - b)
  console.log(
    `${name}: ${times[0]!.toFixed(1)} us per decision best, ${times[ROUNDS >> 1]!.toFixed(1)} median ` +
      `(${ROUNDS} rounds of ${decisions}); mean tree size ${(sizeSum / (ROUNDS * decisions)).toFixed(2)} choices`,
  )
}

const decisions = Number(process.argv[2] ?? 5000)
measure('batch 1, one key', 1, 1, 0, decisions)
measure('batch 8, three keys of 2 rows + 2 plain rows', 3, 2, 2, Math.ceil(decisions / 4))
