/**
 * Checks an exported demo model against Loom itself: the tokenizer loads and encodes exactly as the
 * recipe's Python encoder did, and a real server (native CPU backend, local adapter source) serving
 * the folder produces, greedily, the same tokens as the PyTorch model for every prompt in the
 * recipe's report — through the base model, each adapter (speculating with its own Medusa heads
 * when its folder holds them, LoRAX's Medusa+LoRA), and the first adapter read from its
 * `adapter_model.bin` — all sent at once; then again with the Medusa heads (version 2, then their
 * version 1 layout, written into the temp dir) as the default speculative adapter, which must not
 * change a token.
 *
 *   node --import tsx tools/demo-model/verify-in-loom.ts [model folder] [report json]
 */
import 'reflect-metadata'
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { stringify } from 'yaml'
import { readSafetensors, writeSafetensors, type TensorToWrite } from '@loom/testkit'
import { loadConfig } from '../../core/src/config/index.ts'
import { LoomServer } from '../../core/src/server/loom-server.ts'
import { HfTokenizerLoader } from '../../core/src/tokenizer/index.ts'

interface Expected {
  readonly adapter: string | null
  readonly prompt: string
  readonly ids: number[]
}

interface GenerateResponse {
  generated_text: string
  details: { tokens: { id: number }[]; generated_tokens: number; skipped_tokens?: number }
}

async function generate(base: string, e: Expected): Promise<{ e: Expected; out: GenerateResponse }> {
  const body = {
    inputs: e.prompt,
    parameters: {
      max_new_tokens: e.ids.length,
      do_sample: false,
      details: true,
      ...(e.adapter === null ? {} : { adapter_id: e.adapter, adapter_source: 'local' }),
    },
  }
  const res = await fetch(`${base}/generate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  if (!res.ok) throw new Error(`${res.status} ${await res.text()}`)
  return { e, out: (await res.json()) as GenerateResponse }
}

/**
 * Writes the demo heads (`medusa/`, LoRAX version 2) in the version 1 layout into `dest`: the same
 * tensors plus `{h}.{layers}.weight`, each head's own LM head, here a copy of the model's
 * `lm_head.weight`, so the logits are those of version 2. The kit ships only the heads
 * config/default.yaml serves; this keeps the version 1 reader checked against PyTorch's tokens.
 */
async function writeMedusaV1(modelDir: string, dest: string): Promise<void> {
  const config = JSON.parse(await readFile(join(modelDir, 'medusa', 'config.json'), 'utf8')) as {
    medusa_num_heads: number
    medusa_num_layers: number
  }
  const f32 = (t: { dtype: TensorToWrite['dtype']; shape: readonly number[]; data: Float64Array }): TensorToWrite => ({
    dtype: t.dtype,
    shape: t.shape,
    data: Float32Array.from(t.data),
  })
  const tensors: Record<string, TensorToWrite> = {}
  for (const [name, t] of readSafetensors(join(modelDir, 'medusa', 'medusa_lm_head.safetensors')).tensors)
    tensors[name] = f32(t)
  const lmHead = readSafetensors(join(modelDir, 'model.safetensors')).tensors.get('lm_head.weight')
  if (lmHead === undefined) throw new Error(`no lm_head.weight in ${modelDir}/model.safetensors`)
  for (let h = 0; h < config.medusa_num_heads; h++) tensors[`${h}.${config.medusa_num_layers}.weight`] = f32(lmHead)
  await mkdir(dest)
  await writeFile(join(dest, 'config.json'), JSON.stringify({ ...config, version: 1 }, null, 2))
  writeSafetensors(join(dest, 'medusa_lm_head.safetensors'), tensors)
}

async function main(): Promise<void> {
  const modelDir = resolve(process.argv[2] ?? 'models/demo')
  const reportPath = resolve(process.argv[3] ?? 'tools/demo-model/results.json')
  const report = JSON.parse(await readFile(reportPath, 'utf8')) as {
    expected_greedy: Expected[]
    tokenizer_cases?: { text: string; ids: number[] }[]
  }

  const tokenizer = await new HfTokenizerLoader().load(modelDir)
  if (tokenizer === null) throw new Error(`no tokenizer.json in ${modelDir}`)
  let failures = 0
  for (const c of report.tokenizer_cases ?? []) {
    const ids = tokenizer.encode(c.text, { addSpecialTokens: false })
    const same = ids.length === c.ids.length && ids.every((x, i) => x === c.ids[i])
    const back = tokenizer.decode(ids, { skipSpecialTokens: false })
    if (!same || back !== c.text) {
      failures++
      console.log(`tokenizer mismatch on ${JSON.stringify(c.text.slice(0, 60))}`)
    }
  }
  console.log(`tokenizer: ${(report.tokenizer_cases ?? []).length - failures} cases encode and round-trip identically`)

  const eosId = tokenizer.encode(tokenizer.eosToken ?? '', { addSpecialTokens: false })[0] ?? -1
  const dir = await mkdtemp(join(tmpdir(), 'loom-demo-verify-'))
  // A copy of the first adapter with only its adapter_model.bin, so the pickle reader is exercised.
  const binAdapter = join(dir, 'bin-adapter')
  await mkdir(binAdapter)
  for (const f of ['adapter_config.json', 'adapter_model.bin'])
    await copyFile(join(modelDir, 'adapters/kjv', f), join(binAdapter, f))
  const medusaV1 = join(dir, 'medusa-v1')
  await writeMedusaV1(modelDir, medusaV1)
  const requests = [
    ...report.expected_greedy,
    ...report.expected_greedy.filter((e) => e.adapter === 'kjv').map((e) => ({ ...e, adapter: binAdapter })),
  ]
  const runs: { label: string; medusa: string | null }[] = [
    { label: 'plain', medusa: null },
    { label: 'medusa v2', medusa: join(modelDir, 'medusa') },
    { label: 'medusa v1', medusa: medusaV1 },
  ]
  try {
    for (const run of runs) {
      const yaml = {
        server: { port: 0, host: '127.0.0.1', log_level: 'warn' },
        model: { id: 'demo', path: modelDir },
        limits: { max_total_tokens: 512 },
        adapters: { default_source: 'local', cache_dir: join(dir, 'cache') },
        speculation: { medusa_adapter: run.medusa === null ? null : { id: run.medusa, source: 'local' } },
        plugins: [
          { use: '@loom/backend-cuda-native', options: { device: 'cpu', threads: 2, kv_cache_tokens: 8192 } },
          { use: '@loom/source-local', options: { roots: [join(modelDir, 'adapters'), modelDir, dir] } },
        ],
      }
      await writeFile(join(dir, 'loom.yaml'), stringify(yaml))
      const server = await LoomServer.create(await loadConfig(join(dir, 'loom.yaml')))
      try {
        const base = await server.listen({ host: '127.0.0.1', port: 0 })
        await server.start()
        // All at once: base and adapter rows share batches, as the demo will show.
        const results = await Promise.all(requests.map((e) => generate(base, e)))
        let generated = 0
        let skipped = 0
        for (const { e, out } of results) {
          const got = out.details.tokens.map((t) => t.id)
          const eos = e.ids.indexOf(eosId)
          const want = eos >= 0 ? e.ids.slice(0, eos + 1) : e.ids
          let same = 0
          while (same < want.length && got[same] === want[same]) same++
          const ok = same === want.length
          if (!ok) failures++
          generated += out.details.generated_tokens
          skipped += out.details.skipped_tokens ?? 0
          const who = e.adapter === binAdapter ? 'kjv (.bin)' : (e.adapter ?? 'base')
          console.log(
            `${run.label}: ${ok ? 'ok  ' : 'DIFF'} ${who} ${JSON.stringify(e.prompt)}: ` +
              `${same}/${want.length} tokens as PyTorch, ${out.details.skipped_tokens ?? 0} from speculation → ` +
              JSON.stringify(out.generated_text.slice(0, 60)),
          )
        }
        if (run.medusa !== null) {
          console.log(
            `${run.label}: ${skipped} of ${generated} tokens came from accepted speculation ` +
              `(${(generated / Math.max(1, generated - skipped)).toFixed(2)} tokens per step)`,
          )
        }
      } finally {
        await server.close()
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
  if (failures > 0) {
    console.log(`${failures} mismatches`)
    process.exitCode = 1
  } else console.log('all outputs match')
}

await main()
