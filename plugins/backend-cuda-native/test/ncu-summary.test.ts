// gpu/ncu-summary.py, which gpu/profile.sh runs on a GPU machine over Nsight Compute's CSV: one
// line per launch with its name stripped of namespaces and parameters, and its figures. Fed a CSV
// in ncu's shape here (its own ==PROF== lines included); skipped where python3 is missing.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const script = fileURLToPath(new URL('../gpu/ncu-summary.py', import.meta.url))
const hasPython = spawnSync('python3', ['--version']).status === 0

/** ncu's details page as CSV: one row per metric of each launch. */
function ncuCsv(launches: { id: number; kernel: string; grid: string; metrics: [string, string, string][] }[]): string {
  const head = [
    'ID',
    'Kernel Name',
    'Grid Size',
    'Block Size',
    'Section Name',
    'Metric Name',
    'Metric Unit',
    'Metric Value',
  ]
  const quote = (cells: (string | number)[]) => cells.map((c) => `"${String(c).replace(/"/g, '""')}"`).join(',')
  const lines = ['==PROF== Connected to process 1 (/tmp/lg/loom-native-test)', quote(head)]
  for (const l of launches)
    for (const [name, unit, value] of l.metrics)
      lines.push(quote([l.id, l.kernel, l.grid, '(128, 1, 1)', 'GPU Speed Of Light Throughput', name, unit, value]))
  lines.push('==PROF== Disconnected from process 1')
  return lines.join('\n') + '\n'
}

t.test('one line per launch, names without namespaces or parameters', { skip: !hasPython && 'no python3' }, (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ncu-summary-'))
  const csv = path.join(dir, 'ncu.csv')
  writeFileSync(
    csv,
    ncuCsv([
      {
        id: 1,
        kernel: 'void unnamed>::tc_attention_kernel<__half, 128>(const float *, long, const T1 *, AttnShape)',
        grid: '(9, 8, 1)',
        metrics: [
          ['Duration', 'ns', '19,328'],
          ['DRAM Throughput', '%', '2.36'],
          ['Registers Per Thread', 'register/thread', '167'],
        ],
      },
      {
        id: 0,
        kernel:
          '(anonymous namespace)::sample_kernel(const float *, long, long, loom::ParamList<loom::SampleParams, 16>)',
        grid: '(1, 1, 1)',
        metrics: [['Duration', 'ns', '105,216']],
      },
    ]),
  )
  const out = spawnSync('python3', [script, csv], { encoding: 'utf8' })
  t.equal(out.status, 0, out.stderr)
  const lines = out.stdout.trimEnd().split('\n')
  t.match(lines[0], /^id \| kernel \| grid \| block \| time \| dram /, 'a header')
  t.equal(lines[1], '0 | sample_kernel | (1,1,1) | (128,1,1) | 105,216 ns | - | - | - | - | - | -', 'in launch order')
  t.equal(
    lines[2],
    '1 | tc_attention_kernel<__half, 128> | (9,8,1) | (128,1,1) | 19,328 ns | 2.36% | - | - | - | - | 167',
  )
  t.equal(lines.length, 3)
  t.end()
})

t.test('an empty profile says so and fails', { skip: !hasPython && 'no python3' }, (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ncu-summary-'))
  const csv = path.join(dir, 'ncu.csv')
  writeFileSync(csv, ncuCsv([]))
  const out = spawnSync('python3', [script, csv], { encoding: 'utf8' })
  t.equal(out.status, 1)
  t.match(out.stdout, /no kernel in the profile/)
  t.end()
})
