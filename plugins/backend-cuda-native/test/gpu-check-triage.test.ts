// gpu/check.sh's part c, the triage a failing GPU check runs before a session's GPU time is gone:
// it must rerun exactly part a's failing seed and families and part b's failing model, with each
// kernel path off in turn, and say which one a failure follows. No GPU here, so nvidia-smi, cmake
// and nvcc are stand-ins on PATH and the "built" program is a script that fails part a unless
// fused-norm is off and part b unless pdl is off. Its --kernel-paths is the real program's, so the
// triage's rows are the names LOOM_CUDA_DISABLE takes today.
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { buildTestProgram, run } from './test-program.ts'

const checkScript = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'gpu', 'check.sh')

function script(file: string, body: string): void {
  writeFileSync(file, `#!/usr/bin/env bash\n${body}\n`)
  chmodSync(file, 0o755)
}

/** A folder with stand-in GPU tools and a pre-built stand-in test program; removed on teardown. */
function standIns(t: Test, realProgram: string): { env: NodeJS.ProcessEnv; calls: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'loom-check-triage-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const bin = path.join(dir, 'bin')
  const build = path.join(dir, 'build')
  for (const d of [bin, build]) mkdirSync(d)
  script(
    path.join(bin, 'nvidia-smi'),
    `case "$*" in *compute_cap*noheader*) echo "9.0" ;; *) echo "name, compute_cap"; echo "Stand-in GPU, 9.0" ;; esac`,
  )
  script(path.join(bin, 'cmake'), 'exit 0')
  script(path.join(bin, 'nvcc'), 'echo "Build cuda_13.0 (stand-in)"')
  const calls = path.join(dir, 'calls.log')
  script(
    path.join(build, 'loom-native-test'),
    `echo "\${LOOM_CUDA_DISABLE-}|$*" >> "${calls}"
for a in "$@"; do [ "$a" = --kernel-paths ] && exec "${realProgram}" --kernel-paths; done
off=",\${LOOM_CUDA_DISABLE-},"
if [[ " $* " == *" --models "* ]]; then
  echo "model    dtype devices           worst greedy        result"
  echo "llama    f32   cuda vs cpu       0.300 20/20         ok"
  if [[ $off == *,pdl,* ]]; then echo "mistral  bf16  cuda vs cpu       0.400 20/20         ok"; echo PASSED; exit 0; fi
  echo "mistral  bf16  cuda vs cpu       1.700 19/20         FAIL"
  echo "  worst: logits, step 3, row 2, column 7: 1.2 vs 1.1"
  echo FAILED
  exit 1
fi
if [[ $off == *,fused-norm,* ]]; then echo "cuda        1     120         0    0.400      1.0  ok"; echo PASSED; exit 0; fi
echo "cuda        1    1500         3    9.000      1.0  matmul bfloat16 T=2"
echo "failed families: cuda seed 1: matmul,cache"
echo FAILED
exit 1`,
  )
  return {
    env: {
      ...process.env,
      PATH: `${bin}:${process.env.PATH}`,
      CUDACXX: path.join(bin, 'nvcc'),
      LOOM_CHECK_BUILD: build,
    },
    calls,
  }
}

t.test('a failing check names the kernel path each failure follows', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const { env, calls } = standIns(t, built.program)
  const result = await run('bash', [checkScript, '--seed', '1', '--seed', '2'], env)
  t.comment(result.output.trimEnd())
  t.equal(result.status, 1, 'the check still fails')
  t.match(result.output, /^== c\. which kernel path: part a seed 1 families matmul,cache; part b model mistral/m)

  const rows = new Map<string, string>()
  for (const line of result.output.split('\n')) {
    const m = /^(\S+)\s+(passed|FAILED \([^)]*\))\s+(passed|FAILED \([^)]*\))$/.exec(line)
    if (m) rows.set(m[1]!, `${m[2]} / ${m[3]}`)
  }
  const paths = (await run(built.program, ['--kernel-paths'])).output.trim().split('\n')
  t.ok(paths.includes('pdl') && paths.includes('fused-norm'), `kernel paths: ${paths.join(', ')}`)
  t.same([...rows.keys()], ['(none)', ...paths, 'all'], 'none off, each path off alone, then all off')
  for (const p of ['(none)', ...paths.filter((p) => p !== 'pdl' && p !== 'fused-norm')])
    t.equal(rows.get(p), 'FAILED (rc 1, 3 failing cases) / FAILED (rc 1)', `${p}: both still fail`)
  t.equal(rows.get('pdl'), 'FAILED (rc 1, 3 failing cases) / passed', 'pdl off: part b passes')
  t.equal(rows.get('fused-norm'), 'passed / FAILED (rc 1)', 'fused-norm off: part a passes')
  t.equal(rows.get('all'), 'passed / passed', 'all off: both pass')

  const reruns = readFileSync(calls, 'utf8').trim().split('\n').slice(3) // after part a, part b, --kernel-paths
  t.equal(reruns.length, 2 * (paths.length + 2), 'one part a and one part b rerun per row')
  for (const [i, call] of reruns.entries()) {
    const [off = '', args = ''] = call.split('|')
    const row = Math.floor(i / 2)
    t.equal(off, row === 0 ? '' : row <= paths.length ? paths[row - 1] : paths.join(','), `rerun ${i}: paths off`)
    if (i % 2 === 0)
      t.match(args, /--device cuda --seed 1 --families matmul,cache$/, `rerun ${i}: part a's failure only`)
    else t.match(args, /--models real .*--model mistral$/, `rerun ${i}: part b's failing model only`)
  }
})

t.test('a budget of 0 runs no rerun, and a passing check no triage', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const { env } = standIns(t, built.program)
  const spent = await run('bash', [checkScript, '--seed', '1'], { ...env, LOOM_CHECK_TRIAGE_SECONDS: '0' })
  t.equal(spent.status, 1)
  t.match(spent.output, /budget spent: the remaining rows were not run/)
  t.notMatch(spent.output, /^\(none\)/m)

  const passing = await run('bash', [checkScript, '--seed', '1'], { ...env, LOOM_CUDA_DISABLE: 'pdl,fused-norm' })
  t.equal(passing.status, 0, passing.output)
  t.match(passing.output, /^== PASSED in /m)
  t.notMatch(passing.output, /== c\./)
})
