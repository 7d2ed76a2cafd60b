// The optimized cpu kernels against the scalar reference kernels on a seeded grid of real-model
// shapes (see native/src/selftest/kernel-self-test.cc).
import t from 'tap'
import { loadNative } from '../src/index.ts'

for (const seed of [1, 2, 3]) {
  t.test(`kernel self-test, seed ${seed}`, async (t) => {
    const result = await loadNative().kernelSelfTest(seed, 2)
    t.comment(result.report.trimEnd())
    t.ok(result.cases > 500, `${result.cases} cases ran`)
    t.equal(result.failures, 0, `worst: ${result.worstCase}`)
    t.ok(result.ok)
  })
}

t.test('single-threaded pool gives the same verdict', async (t) => {
  const result = await loadNative().kernelSelfTest(7, 1)
  t.equal(result.failures, 0, `worst: ${result.worstCase}`)
})
