import t, { type Test } from 'tap'
import { copyFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildModel } from '@loom/testkit'
import { readLoraAdapter } from '../../src/adapters/read-lora.ts'
import type { LoraWeights } from '../../src/contracts/step-runner.ts'
import { LoomError } from '../../src/errors/index.ts'
import { LORA_TINY_MODEL } from '../../../tools/fixtures/lora-tiny-options.ts'
import { specOf } from './model-spec-of.ts'

/**
 * `readLoraAdapter` with `adapter_model.bin`: the same `LoraWeights` as the safetensors twin, the
 * safetensors file preferred when both exist, the same validation, hostile pickles refused.
 */

const FIXTURES = join(import.meta.dirname, 'fixtures')
const TWIN = join(FIXTURES, 'lora-tiny')
const MARKER = '/tmp/loom-torch-bin-pwned'

/** A fresh adapter folder with the twin's config and the given weight files (fixture paths). */
function adapterDir(t: Test, files: { safetensors?: string; bin?: string }): string {
  const dir = t.testdir()
  copyFileSync(join(TWIN, 'adapter_config.json'), join(dir, 'adapter_config.json'))
  if (files.safetensors !== undefined) copyFileSync(files.safetensors, join(dir, 'adapter_model.safetensors'))
  if (files.bin !== undefined) copyFileSync(files.bin, join(dir, 'adapter_model.bin'))
  return dir
}

/** LoraWeights as plain arrays, for deep comparison. */
function plain(w: LoraWeights): unknown {
  return w.layers.map((layer) =>
    Object.fromEntries(
      Object.entries(layer).map(([m, v]) => [
        m,
        { rank: v.rank, scale: v.scale, a: Array.from(v.a), b: Array.from(v.b) },
      ]),
    ),
  )
}

async function refusal(promise: Promise<unknown>): Promise<LoomError | null> {
  return promise.then(
    () => null,
    (e: unknown) => (e instanceof LoomError ? e : null),
  )
}

t.test('readLoraAdapter', async (t) => {
  const spec = specOf(await buildModel(t.testdir(), LORA_TINY_MODEL))
  const stWeights = await readLoraAdapter(
    adapterDir(t, { safetensors: join(TWIN, 'adapter_model.safetensors') }),
    'my/adapter',
    spec,
  )

  t.test('a .bin alone gives exactly the LoraWeights of its safetensors twin', async (t) => {
    const dir = adapterDir(t, { bin: join(TWIN, 'adapter_model.bin') })
    const w = await readLoraAdapter(dir, 'my/adapter', spec)
    t.equal(w.key, 'my/adapter')
    t.same(Object.keys(w.layers[0]!).sort(), Object.keys(stWeights.layers[0]!).sort())
    t.equal(Object.keys(w.layers[0]!).length, 7, 'all seven projections')
    t.same(plain(w), plain(stWeights))
    t.equal(w.layers[0]!.q_proj!.scale, 4 / 2)
  })

  t.test('with both files the safetensors one is used', async (t) => {
    const doubled = join(FIXTURES, 'torch-bin', 'lora-tiny-doubled.bin')
    // The doubled .bin is a valid adapter of its own, so reading it would show.
    const alone = await readLoraAdapter(adapterDir(t, { bin: doubled }), 'my/adapter', spec)
    t.same(
      Array.from(alone.layers[0]!.down_proj!.b),
      Array.from(stWeights.layers[0]!.down_proj!.b).map((v) => 2 * v),
    )
    const both = adapterDir(t, { safetensors: join(TWIN, 'adapter_model.safetensors'), bin: doubled })
    t.same(plain(await readLoraAdapter(both, 'my/adapter', spec)), plain(stWeights))
    // Not even opened: a hostile .bin beside a safetensors file changes nothing.
    const hostile = adapterDir(t, {
      safetensors: join(TWIN, 'adapter_model.safetensors'),
      bin: join(FIXTURES, 'torch-bin', 'malicious-os-system.bin'),
    })
    t.same(plain(await readLoraAdapter(hostile, 'my/adapter', spec)), plain(stWeights))
  })

  t.test('a hostile .bin is refused naming the global, and its payload never runs', async (t) => {
    rmSync(MARKER, { force: true })
    const dir = adapterDir(t, { bin: join(FIXTURES, 'torch-bin', 'malicious-os-system.bin') })
    const err = await refusal(readLoraAdapter(dir, 'my/adapter', spec))
    t.equal(err?.code, 'adapter_invalid')
    t.equal(err?.status, 422)
    t.same(err?.params, {
      id: 'my/adapter',
      detail: 'adapter_model.bin is not a plain state dict: pickle refers to `os.system`, which is not allowed',
    })
    t.notOk(existsSync(MARKER), `${MARKER} was not created`)
  })

  t.test('the .bin goes through the same validation as safetensors', async (t) => {
    const rank = adapterDir(t, { bin: join(TWIN, 'adapter_model.bin') })
    const config = JSON.parse(readFileSync(join(rank, 'adapter_config.json'), 'utf8')) as Record<string, unknown>
    writeFileSync(join(rank, 'adapter_config.json'), JSON.stringify({ ...config, r: 4 }))
    const rankErr = await refusal(readLoraAdapter(rank, 'my/adapter', spec))
    t.match(rankErr?.message, 'layer 0 q_proj has rank 2, but adapter_config.json says r = 4')

    const wider = await refusal(
      readLoraAdapter(adapterDir(t, { bin: join(TWIN, 'adapter_model.bin') }), 'my/adapter', {
        ...spec,
        hiddenSize: 32,
      }),
    )
    t.match(wider?.message, 'lora_A has shape [2, 16], expected [rank, 32]')

    const views = await refusal(
      readLoraAdapter(adapterDir(t, { bin: join(FIXTURES, 'torch-bin', 'views.bin') }), 'my/adapter', spec),
    )
    t.match(views?.message, 'unexpected tensor slice')

    const empty = adapterDir(t, {})
    t.match(
      (await refusal(readLoraAdapter(empty, 'my/adapter', spec)))?.message,
      'adapter_model.safetensors is missing',
    )
  })
})
