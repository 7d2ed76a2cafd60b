// The cuda device's kernels that the SIMT emulator covers (native/test-program/emulated-cuda.cc:
// attention with its host plan and split-KV merge, argmax, top-k, log-sum-exp, the tree walk, the
// sampler, the element-wise ops, LoRA shrink/expand/apply and matmul's GEMV, SIMT, tensor-core,
// prefill and skinny kernels), run on this CPU by the emulator and checked against the scalar reference by
// the self-test's own cases. No GPU: this is what catches a kernel's logic errors in CI before a GPU
// session spends minutes on them.
import t from 'tap'
import { buildTestProgram, run } from './test-program.ts'

// The test program's build (or the wait for another file's), a whole seed on the emulator and a
// second run of two families: ~4 minutes on a busy 2-core machine, where tap's 300 s per file
// expired once (CI of 2026-11-28).
t.setTimeout(600_000)

t.test('cuda kernels on the SIMT emulator match the reference', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--device', 'emulated-cuda', '--seed', '1'])
  t.comment(result.output.trimEnd())
  t.equal(result.status, 0, 'every case passes')
  const row = /^emulated-cuda\s+1\s+(\d+)\s+(\d+)\s/m.exec(result.output)
  t.ok(row, 'a result row for seed 1')
  t.ok(Number(row?.[1]) >= 1000, `the grids ran (${row?.[1]} cases)`)
  const families = ['attention', 'argmax', 'top_k', 'log_sum_exp', 'tree_walk', 'sample', 'rmsnorm', 'rope']
  const more = ['rope_tables', 'embedding', 'silu', 'gather_rows', 'kv_slots', 'kv_cache', 'lora_shrink', 'matmul']
  for (const family of [...families, ...more, 'lora_expand', 'lora_apply', 'rmsnorm_matmul'])
    t.match(result.output, new RegExp(`^${family}: .* worst `, 'm'), `${family} was checked`)
  t.equal(Number(row?.[2]), 0, 'no failures')
  const coverage = /emulated attention: (\d+) calls, (\d+) with keys split across blocks/.exec(result.output)
  t.ok(Number(coverage?.[2]) > 0, `the split-KV path ran (${coverage?.[0]})`)
  t.ok(Number(coverage?.[2]) < Number(coverage?.[1]), 'and the single-item path too')
  const matmul =
    /emulated matmul: (\d+) gemv jobs \((\d+) calls of several in one launch\), (\d+) simt jobs, (\d+) tensor-core jobs \((\d+) with split K\), (\d+) prefill jobs, (\d+) wgmma jobs/.exec(
      result.output,
    )
  const ran = [1, 3, 4, 6, 7].every((i) => Number(matmul?.[i]) > 0)
  t.ok(ran, `the emulated gemv, simt, tensor-core, prefill and wgmma kernels ran (${matmul?.[0]})`)
  const tma = /, (\d+) wgmma\+tma jobs/.exec(result.output)
  t.ok(Number(tma?.[1]) > 0, `and the TMA-fed wgmma kernel (${tma?.[0]})`)
  t.ok(Number(matmul?.[2]) > 0, 'and the GEMV with several jobs in one launch')
  const split = Number(matmul?.[5])
  t.ok(split > 0 && split < Number(matmul?.[4]), 'and the tensor-core GEMM both with K split and whole')
  const skinny = /, (\d+) skinny jobs \((\d+) with split K\)/.exec(result.output)
  const skinnySplit = Number(skinny?.[2])
  t.ok(
    skinnySplit > 0 && skinnySplit < Number(skinny?.[1]),
    `and the skinny GEMM both with K split and whole (${skinny?.[0]})`,
  )
  const norm =
    /emulated rmsnorm_matmul: (\d+) calls with the norm in the GEMV \((\d+) writing the normed rows\), (\d+) as two ops, (\d+) with the norm writing the prefill GEMM's bf16 x/.exec(
      result.output,
    )
  t.ok(
    Number(norm?.[1]) > Number(norm?.[2]) && Number(norm?.[2]) > 0 && Number(norm?.[3]) > 0 && Number(norm?.[4]) > 0,
    `rmsnorm_matmul folded into the GEMV with and without writing the normed rows, as two ops, and writing the prefill GEMM's x (${norm?.[0]})`,
  )
  const lora = /emulated lora: (\d+) launches with their items inline, (\d+) staged/.exec(result.output)
  t.ok(
    Number(lora?.[1]) > 0 && Number(lora?.[2]) > 0,
    `LoRA launches with their items both in the parameters and staged (${lora?.[0]})`,
  )
  const lists = /emulated row lists: (.*)/.exec(result.output)?.[1] ?? ''
  for (const op of ['sample', 'kv_slots', 'tree_walk']) {
    const m = new RegExp(`${op} (\\d+) inline / (\\d+) staged`).exec(lists)
    t.ok(Number(m?.[1]) > 0 && Number(m?.[2]) > 0, `${op} launches with their rows both inline and staged (${m?.[0]})`)
  }
})

t.test('LOOM_CUDA_DISABLE sends those calls to the fallback kernels, which still match', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const env = { ...process.env, LOOM_CUDA_DISABLE: 'tc-attention, tc-gemm , skinny-gemm,pdl,fused-norm, wgmma' }
  const result = await run(
    built.program,
    ['--device', 'emulated-cuda', '--seed', '2', '--families', 'attention,matmul'],
    env,
  )
  if (result.status !== 0) t.comment(result.output.trimEnd())
  t.equal(result.status, 0, 'every case passes')
  t.match(result.output, /^attention: .* worst /m, 'attention was checked')
  t.match(result.output, /^matmul: .* worst /m, 'matmul was checked')
  t.notMatch(result.output, /^(rmsnorm|sample|lora_apply): /m, 'and only the families asked for')
  const attention = /emulated attention: (\d+) calls, .*, (\d+) on the tensor-core kernel/.exec(result.output)
  t.ok(
    Number(attention?.[1]) > 0 && Number(attention?.[2]) === 0,
    `no call took tensor-core attention (${attention?.[0]})`,
  )
  const matmul = /emulated matmul: .*, (\d+) simt jobs, (\d+) tensor-core jobs.*, (\d+) skinny jobs/.exec(result.output)
  t.ok(Number(matmul?.[1]) > 0 && Number(matmul?.[2]) === 0, `no job took the tensor-core GEMM (${matmul?.[0]})`)
  t.equal(Number(matmul?.[3]), 0, 'and none the skinny GEMM')
  const prefill = /emulated matmul: .*, (\d+) prefill jobs, (\d+) wgmma jobs, (\d+) wgmma\+tma jobs/.exec(result.output)
  t.ok(
    Number(prefill?.[1]) > 0 && Number(prefill?.[2]) === 0 && Number(prefill?.[3]) === 0,
    `no job took a wgmma GEMM (${prefill?.[0]})`,
  )
  const norm =
    /emulated rmsnorm_matmul: (\d+) calls with the norm in the GEMV .*, (\d+) as two ops, (\d+) with the norm writing/.exec(
      result.output,
    )
  t.ok(
    Number(norm?.[1]) === 0 && Number(norm?.[2]) > 0 && Number(norm?.[3]) === 0,
    `no norm was folded into the GEMV or wrote the prefill GEMM's x (${norm?.[0]})`,
  )
})

t.test('LOOM_CUDA_DISABLE with an unknown path is refused, naming it and the known ones', async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'OFF' })
  if ('error' in built) return t.fail(built.error)
  const env = { ...process.env, LOOM_CUDA_DISABLE: 'tc-gemm,tc-atention' }
  const result = await run(built.program, ['--device', 'emulated-cuda', '--seed', '1'], env)
  t.equal(result.status, 2)
  t.match(
    result.output,
    'unknown kernel path "tc-atention" (expected a comma-separated list of tc-attention, tc-gemm, skinny-gemm, pdl, fused-norm, wgmma, tma)',
  )
})
