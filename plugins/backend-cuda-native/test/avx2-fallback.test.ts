// The AVX2 kernels (for CPUs without AVX-512). The normal build uses every vector unit of the
// build machine, so on an AVX-512 machine this builds the test program's AVX2 variant
// (-DLOOM_AVX2=ON, AVX-512 off) in a temp folder and runs the kernel self-test on it, so both
// paths stay checked.
import t from 'tap'
import { loadNative } from '../src/index.ts'
import { buildTestProgram, run } from './test-program.ts'

t.test('the AVX2 build passes the kernel self-test', async (t) => {
  if (loadNative().isa === 'avx2') {
    t.pass('the main build is the AVX2 one; kernels.test.ts checks it')
    return
  }
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF', LOOM_AVX2: 'ON' })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--seed', '5'])
  t.comment(result.output.trimEnd())
  t.match(result.output, /cpu kernels: avx2/, 'the program runs the AVX2 kernels')
  t.equal(result.status, 0, 'every case passes')
  const row = /^cpu\s+5\s+(\d+)\s+(\d+)\s/m.exec(result.output)
  t.ok(row && Number(row[1]) > 500, `${row?.[1]} cases ran`)
  t.equal(row && Number(row[2]), 0, 'no failures')
})
