// Part b on the SIMT emulator: whole models through the cuda device's kernels and its
// device-memory paths, against the cpu device. Its own file: the kernel self-test beside it takes
// most of tap's per-file budget on a 2-core machine.
import t from 'tap'
import { buildTestProgram, run } from './test-program.ts'

t.test('whole models through the emulated cuda device match the cpu device (part b, Llama)', async (t) => {
  // The model's device-memory paths (weights uploaded, results downloaded, every tree node sampled
  // in one launch, f16 KV cache) with the emulated kernels, against the cpu device: greedy tokens
  // and walk ends identical, seeded sampled tokens identical, rows alone equal to themselves.
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const args = ['--models', 'small', '--device', 'emulated-cuda', '--model', 'llama', '--steps', '1']
  const result = await run(built.program, args)
  t.comment(result.output.trimEnd())
  t.equal(result.status, 0, 'every model passes')
  const rows = [...result.output.matchAll(/^llama\s+(f32|bf16)\s+emulated-cuda vs cpu .* ok$/gm)]
  t.equal(rows.length, 2, 'llama in f32 and bf16, both ok')
})
