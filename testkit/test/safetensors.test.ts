import t from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { writeSafetensors } from '../src/safetensors-writer.ts'
import { readSafetensors } from '../src/safetensors-reader.ts'
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../src/float-codec.ts'

t.test('header layout: u64 length, JSON with __metadata__, 8-byte aligned data', async (t) => {
  const dir = t.testdir()
  const path = join(dir, 'a.safetensors')
  writeSafetensors(path, {
    x: { dtype: 'F32', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
    y: { dtype: 'F16', shape: [3], data: new Float32Array([0.5, -2, 65504]) },
  })
  const buf = readFileSync(path)
  const n = Number(buf.readBigUInt64LE(0))
  t.equal((8 + n) % 8, 0)
  const header = JSON.parse(buf.subarray(8, 8 + n).toString())
  t.same(header.__metadata__, { format: 'pt' })
  t.same(header.x, { dtype: 'F32', shape: [2, 3], data_offsets: [0, 24] })
  t.same(header.y, { dtype: 'F16', shape: [3], data_offsets: [24, 30] })
  t.equal(buf.length, 8 + n + 30)
})

t.test('F32, F16 and BF16 round-trip through the reader', async (t) => {
  const dir = t.testdir()
  const values = new Float32Array([0, 1, -1, 0.1, 3.14159, -1e-3, 1000, 1e-6])
  for (const dtype of ['F32', 'F16', 'BF16'] as const) {
    const path = join(dir, `${dtype}.safetensors`)
    writeSafetensors(path, { v: { dtype, shape: [values.length], data: values } })
    const got = readSafetensors(path).tensors.get('v')!
    t.equal(got.dtype, dtype)
    const rel = dtype === 'F32' ? 1e-7 : dtype === 'F16' ? 1e-3 : 8e-3
    for (let i = 0; i < values.length; i++) {
      const want = values[i]!
      t.ok(Math.abs(got.data[i]! - want) <= rel * Math.abs(want) + (dtype === 'F16' ? 6e-8 : 0), `${dtype} ${want}`)
    }
  }
})

t.test('half and bfloat16 codecs round to nearest even and are exact on representable values', async (t) => {
  const wrong: number[] = []
  for (let bits = 0; bits < 0x10000; bits++) {
    if (((bits >>> 10) & 0x1f) === 0x1f) continue
    if (f32ToF16Bits(f16BitsToF32(bits)) !== bits) wrong.push(bits)
  }
  t.same(wrong, [], 'every finite half survives f16 → f32 → f16')
  t.equal(f32ToF16Bits(1 + 2 ** -11), f32ToF16Bits(1)) // tie → even
  t.equal(f32ToF16Bits(1 + 3 * 2 ** -11), f32ToF16Bits(1 + 2 ** -9)) // tie → even (up)
  t.equal(f32ToF16Bits(1e6), 0x7c00)
  t.equal(bf16BitsToF32(f32ToBf16Bits(1.00390625)), 1) // tie → even
  t.equal(bf16BitsToF32(f32ToBf16Bits(-2.5)), -2.5)
  t.ok(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(NaN))))
})
