import t, { type Test } from 'tap'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { encodeSafetensors, readSafetensors, SeededRandom, writeSafetensors } from '@loom/testkit'
import { SafetensorsFile } from '../../src/adapters/safetensors.ts'
import { LoomError } from '../../src/errors/index.ts'

const ctx = { id: 'owner/adapter', file: 'adapter_model.safetensors' }

/** A file with a hand-written header and `dataBytes` zero bytes of data. */
function rawFile(header: unknown, dataBytes: number, declaredLength?: number): Buffer {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header))
  const prefix = Buffer.alloc(8)
  prefix.writeBigUInt64LE(BigInt(declaredLength ?? json.length))
  return Buffer.concat([prefix, json, Buffer.alloc(dataBytes)])
}

function expectInvalid(t: Test, bytes: Uint8Array, fragment: string): void {
  try {
    SafetensorsFile.parse(bytes, ctx)
    t.fail(`accepted a file that should fail with "${fragment}"`)
  } catch (err) {
    t.ok(err instanceof LoomError && err.code === 'adapter_invalid', String(err))
    const message = (err as Error).message
    t.ok(message.includes('owner/adapter') && message.includes(fragment), message)
  }
}

t.test('decodes F32, F16, BF16 and F64 like the test kit reader', async (t) => {
  const dir = t.testdir()
  const rng = new SeededRandom(1)
  const values = rng.normalArray(301, 2)
  const path = join(dir, 'w.safetensors')
  writeSafetensors(path, {
    f32: { dtype: 'F32', shape: [301], data: values },
    f16: { dtype: 'F16', shape: [7, 43], data: values },
    bf16: { dtype: 'BF16', shape: [301, 1], data: values },
  })
  const file = await SafetensorsFile.read(path, 'x')
  const ref = readSafetensors(path).tensors
  t.same(file.names(), ['f32', 'f16', 'bf16'])
  t.same(file.metadata, { format: 'pt' })
  t.same(file.entry('f16')!.shape, [7, 43])
  for (const name of ['f32', 'f16', 'bf16']) {
    const got = file.float32(name)
    const want = ref.get(name)!.data
    let worst = 0
    for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!))
    t.equal(worst, 0, `${name} bit-exact`)
  }
  // F64 (no writer support: build the bytes by hand) at an unaligned offset.
  const f64 = Buffer.alloc(16)
  f64.writeDoubleLE(1.5, 0)
  f64.writeDoubleLE(-0.25, 8)
  const header = JSON.stringify({
    pad: { dtype: 'U8', shape: [3], data_offsets: [0, 3] },
    d: { dtype: 'F64', shape: [2], data_offsets: [3, 19] },
  })
  const prefix = Buffer.alloc(8)
  prefix.writeBigUInt64LE(BigInt(header.length))
  const parsed = SafetensorsFile.parse(Buffer.concat([prefix, Buffer.from(header), Buffer.from([1, 2, 3]), f64]), ctx)
  t.same([...parsed.float32('d')], [1.5, -0.25])
  t.throws(() => parsed.float32('pad'), /dtype U8/)
  t.throws(() => parsed.float32('nope'), /missing/)
})

t.test('corrupt files fail with adapter_invalid naming the adapter and the problem', async (t) => {
  const good = encodeSafetensors({ w: { dtype: 'F32', shape: [4, 4], data: new Float32Array(16) } })
  expectInvalid(t, good.subarray(0, 5), 'too short')
  expectInvalid(t, good.subarray(0, good.length - 4), 'outside')
  expectInvalid(t, rawFile({}, 0, 1_000_000), 'exceeds the file size')
  expectInvalid(t, rawFile('{"w": ', 0), 'not valid JSON')
  expectInvalid(t, rawFile('[1, 2]', 0), 'not a JSON object')
  expectInvalid(t, rawFile({ w: { dtype: 'F99', shape: [1], data_offsets: [0, 4] } }, 4), 'unknown dtype')
  expectInvalid(t, rawFile({ w: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, 4), 'shape')
  expectInvalid(t, rawFile({ w: { dtype: 'F32', shape: [2], data_offsets: [0] } }, 8), 'data_offsets')
  expectInvalid(t, rawFile({ w: { dtype: 'F32', shape: [2], data_offsets: [8, 4] } }, 8), 'outside')
  expectInvalid(t, rawFile({ w: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } }, 8), 'needs 12 bytes')
  expectInvalid(
    t,
    rawFile(
      {
        a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
        b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] },
      },
      12,
    ),
    'overlap',
  )
  const dir = t.testdir()
  writeFileSync(join(dir, 'empty.safetensors'), '')
  await t.rejects(SafetensorsFile.read(join(dir, 'empty.safetensors'), 'owner/adapter'), { code: 'adapter_invalid' })
  await t.rejects(SafetensorsFile.read(join(dir, 'absent.safetensors'), 'owner/adapter'), /cannot be read \(ENOENT\)/)
})
