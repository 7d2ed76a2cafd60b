// Part b of the native check (native/test-program/model-check.cc) on this machine: random Llama,
// Mistral and Qwen2 models (small shapes, f32 and bf16) on the cpu device against the scalar
// reference device, for a prefill and 20 decode steps of one batch of base, LoRA (ranks 8, 16)
// and Medusa tree rows, each row also run alone. gpu/check.sh runs the same program with cuda
// against cpu at larger shapes.
import t from 'tap'
import { buildTestProgram, run } from './test-program.ts'

t.test('whole models: cpu against the reference, mixed batch and rows alone', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--models', 'small', '--device', 'cpu', '--baseline', 'reference'])
  t.comment(result.output.trimEnd())
  t.equal(result.status, 0, 'every model passes')
  const rows = [
    ...result.output.matchAll(/^(\w+)\s+(f32|bf16)\s+cpu vs reference\s+(\S+)\s+(\d+)\/(\d+).*\s(ok|FAIL)$/gm),
  ]
  t.equal(rows.length, 6, 'llama, mistral, qwen2 in f32 and bf16')
  for (const [, model, dtype, worst, same, total, verdict] of rows) {
    t.ok(Number(worst) <= 1, `${model} ${dtype}: worst error ratio ${worst}`)
    t.ok(Number(total) >= 300 && same === total, `${model} ${dtype}: greedy ${same}/${total}`)
    t.equal(verdict, 'ok', `${model} ${dtype}`)
  }
})
