// The optimized cpu kernels against the scalar reference kernels on a seeded grid of real-model
// shapes (native/src/selftest/kernel-self-test.cc), through the standalone test program
// (native/test-program), built here without the cuda device: cuda-device.test.ts covers that build.
import t from 'tap'
import { buildTestProgram, run } from './test-program.ts'

t.test('kernel self-test of the cpu device, seeds 1-3 and a one-thread pool', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--seed', '1', '--seed', '2', '--seed', '3'])
  t.comment(result.output.trimEnd())
  t.equal(result.status, 0, 'every case passes')
  const rows = [...result.output.matchAll(/^cpu\s+(\d+)\s+(\d+)\s+(\d+)\s/gm)]
  t.equal(rows.length, 3, 'one row per seed')
  for (const [, seed, cases, failures] of rows) {
    t.ok(Number(cases) > 500, `seed ${seed}: ${cases} cases ran`)
    t.equal(Number(failures), 0, `seed ${seed}: no failures`)
  }
  const single = await run(built.program, ['--seed', '7', '--threads', '1'])
  t.equal(single.status, 0, `a single-threaded pool gives the same verdict: ${single.output.slice(-400)}`)
  // int8 weights also have the widening path (the kernel where no integer dot kernel exists,
  // and LOOM_CPU_Q8=widen to measure against it): its results too, batch invariance included.
  const widen = await run(built.program, ['--seed', '4'], { ...process.env, LOOM_CPU_Q8: 'widen' })
  t.equal(widen.status, 0, `int8 through the widening path passes: ${widen.output.slice(-400)}`)
})
