// The GPU benchmark (native/test-program/gpu-bench.cc, issue 15) at its tiny shape on the cpu
// device: the same code gpu/bench.sh runs on a GPU at the Llama-3-8B shape (weights file, load,
// adapters, decode variants with sampling, prefill, the LoRA op, the bandwidth probe, rooflines
// and targets) must produce every row of its table with positive, finite figures. Not a timing
// test: the figures of a shared 2-core machine say nothing about speed.
import t from 'tap'
import { buildTestProgram, run } from './test-program.ts'

/** Seconds in a table cell such as `1.23 ms`, `35.20 µs` or `2.001 s`; NaN otherwise. */
function seconds(cell: string): number {
  const m = /^([\d.]+) (s|ms|µs)$/.exec(cell)
  if (!m) return NaN
  return Number(m[1]) * { s: 1, ms: 1e-3, µs: 1e-6 }[m[2] as 's' | 'ms' | 'µs']
}

t.test('bench at the tiny shape on the cpu device prints every row', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--bench', '--bench-shape', 'tiny', '--device', 'cpu', '--threads', '2'])
  t.comment(result.output.trimEnd())
  t.equal(result.status, 0, 'exits 0')
  t.match(result.output, /^DONE in /m)

  const [table = '', ...breakdowns] = result.output.split("where a step's time goes")
  const rows = new Map<string, string[]>()
  for (const line of table.split('\n')) {
    if (!line.startsWith('| ') || line.startsWith('| figure ')) continue
    const [figure = '', ...cells] = line.slice(2, -2).split(' | ')
    rows.set(figure, cells)
  }
  const figures = [
    'DRAM read bandwidth (best pass)',
    'lora op B=1',
    'lora op B=1 (L2-hot)',
    'lora op B=4 distinct',
    'lora op B=4 distinct (L2-hot)',
    // tiny: intermediate 512, hidden 256; batches 1, the largest (4) and 8
    ...[1, 4, 8].flatMap((b) => [`matmul op gate/up 512x256 B=${b}`, `matmul op down 256x512 B=${b}`]),
    ...[1, 4].flatMap((b) =>
      ['base, greedy', 'base, sampled mix', 'one adapter, sampled mix', 'distinct adapters, sampled mix'].map(
        (v) => `decode B=${b} ${v}`,
      ),
    ),
    'prefill 1x64',
    'prefill 4x16',
  ]
  for (const figure of figures) {
    const cells = rows.get(figure)
    if (!cells) {
      t.fail(`row "${figure}" is missing`)
      continue
    }
    const [time = '', rate = '', , , share = ''] = cells
    const s = seconds(time)
    t.ok(Number.isFinite(s) && s > 0, `${figure}: time ${time}`)
    const r = Number(/^([\d.]+) /.exec(rate)?.[1])
    t.ok(Number.isFinite(r) && r > 0, `${figure}: rate ${rate}`)
    if (figure.startsWith('decode') || figure.startsWith('lora op') || figure.startsWith('matmul op')) {
      const pct = Number(/^(\d+)%$/.exec(share)?.[1])
      t.ok(Number.isFinite(pct) && pct > 0, `${figure}: share of its roofline ${share}`)
    }
  }
  t.match(rows.get('decode B=1 base, greedy')?.[6], /^≥ 75% (PASS|FAIL)$/, 'the batch-1 roofline target is marked')
  const targets = [...rows.keys()].filter((k) => k.startsWith('target: '))
  t.equal(targets.length, 3, 'three ratio targets')
  for (const k of targets) t.match(rows.get(k)?.[6], /^(PASS|FAIL)$/, k)

  // After the table, twice (each op waited for alone; then ops back to back in the running step, by
  // the host's clock on this device): each op's time per step for three steps, shares adding up to
  // the ops' sum.
  t.equal(breakdowns.length, 2, 'two breakdowns')
  t.match(breakdowns[0], /^, by device op \(each op waited for alone/, 'the first waits for each op')
  t.match(breakdowns[1], /^, by device op \(in the running step, no waits: the host's clock/, 'the second does not')
  const steps = ['decode B=1 base, greedy', 'decode B=4 distinct adapters, sampled mix', 'prefill 1x64']
  for (const [which, breakdown = ''] of breakdowns.entries())
    for (const step of steps) {
      const label = `${which === 0 ? 'waited' : 'running'} ${step}`
      const ops = breakdown
        .split('\n')
        .filter((line) => line.startsWith(`| ${step} | `))
        .map((line) => line.slice(2, -2).split(' | '))
      const names = ops.map(([, op]) => op ?? '')
      t.ok(
        names.some((n) => /^matmul \d+(\+\d+)*x\d+$/.test(n)) && names.includes('attention'),
        `${label}: matmul by shape and attention timed (${names.join(', ')})`,
      )
      if (step.includes('distinct')) t.ok(names.includes('lora_apply'), `${label}: the adapters' op timed`)
      const shares = ops.map(([, , , , share]) => Number(/^([\d.]+)%$/.exec(share ?? '')?.[1]))
      const sum = shares.reduce((a, b) => a + b, 0)
      t.ok(Math.abs(sum - 100) < 1, `${label}: shares sum to 100% (${sum.toFixed(1)})`)
      t.ok(
        ops.every(([, , , time]) => seconds(time ?? '') > 0),
        `${label}: every op has a time`,
      )
    }
})

t.test('--bench-profile runs one step of each profiled row and prints no table', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--bench-profile', '--bench-shape', 'tiny', '--device', 'cpu'])
  t.equal(result.status, 0, 'exits 0')
  const steps = [...result.output.matchAll(/\] (.+): one step in the profiler's range$/gm)].map((m) => m[1])
  t.same(
    steps,
    [
      'prefill 1x64',
      'decode B=1 base, greedy',
      'decode B=1 base, sampled mix',
      'decode B=4 base, greedy',
      'decode B=4 base, sampled mix',
      'decode B=4 distinct adapters, sampled mix',
    ],
    'the prefill, batch 1 and the largest batch, in order',
  )
  t.notMatch(result.output, /^\| figure /m, 'no table')
  t.match(result.output, /^DONE in /m)
})
