import { NativeStepRunner } from '../src/index.ts'
import { benchAdapters, benchModel, LORA_RANK } from './bench-assets.ts'
import { timeDecode } from './decode-timer.ts'
const dtype = (process.env.P_DTYPE ?? 'bfloat16') as 'bfloat16'
const batch = Number(process.env.P_BATCH ?? 8)
const mix = (process.env.P_MIX ?? 'base') as 'base'
const modelDir = await benchModel(dtype, console.error)
const adapters = mix === 'base' ? [] : await benchAdapters(modelDir, batch, console.error)
const runner = new NativeStepRunner(modelDir, { threads: 2, kv_block_size: 16, kv_cache_tokens: batch * 16 * 40, max_batch_tokens: batch * 8, adapter_slots: Math.max(1, batch), max_lora_rank: LORA_RANK })
await runner.load()
const slots: number[] = []
for (const a of adapters) slots.push(await runner.loadAdapter(a))
const t0 = Date.now()
let n = 0
while (Date.now() - t0 < Number(process.env.P_MS ?? 6000)) {
  const r = await timeDecode(runner, { batch, mix, slots, promptTokens: 8, warmupSteps: 0, timedSteps: 20, blockSize: 16 })
  n++
  if (n === 1) console.error('step ms', r.stepMs.map((x) => x.toFixed(1)).join(' '))
}
await runner.close()
