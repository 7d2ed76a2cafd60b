// The peer benchmark's GGUF writer (bench/peers): a file it writes is read back by a small reader
// written here from the GGUF v3 layout, independent of the writer: header, metadata of every type
// used, tensor infos (ggml dimension order), alignment of the data section and of every tensor,
// Q8_0 blocks against hand-computed values, and a llama conversion of a small testkit model.
import { mkdtemp, rm } from 'node:fs/promises'
import { readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { bf16BitsToF32, buildModel, f16BitsToF32, readSafetensors } from '@loom/testkit'
import { writeGguf, type GgufTensor } from '../bench/peers/gguf-writer.ts'
import { permuteRopeRows, writeLlamaGguf } from '../bench/peers/llama-gguf.ts'
import { quantizeQ8_0 } from '../bench/peers/q8-0.ts'

type Value = number | bigint | boolean | string | Value[]

interface ReadGguf {
  version: number
  alignment: number
  metadata: Map<string, { type: number; value: Value }>
  tensors: { name: string; dims: bigint[]; type: number; offset: bigint }[]
  dataOffset: number
  buf: Buffer
}

/** Reads a GGUF v3 file: every integer little-endian, counts and lengths u64. */
function readGguf(file: string): ReadGguf {
  const buf = readFileSync(file)
  let at = 0
  const u32 = (): number => {
    const v = buf.readUInt32LE(at)
    at += 4
    return v
  }
  const u64 = (): bigint => {
    const v = buf.readBigUInt64LE(at)
    at += 8
    return v
  }
  const str = (): string => {
    const n = Number(u64())
    const s = buf.toString('utf8', at, at + n)
    at += n
    return s
  }
  const value = (type: number): Value => {
    switch (type) {
      case 4:
        return u32()
      case 5: {
        const v = buf.readInt32LE(at)
        at += 4
        return v
      }
      case 6: {
        const v = buf.readFloatLE(at)
        at += 4
        return v
      }
      case 7:
        return buf[at++] === 1
      case 8:
        return str()
      case 9: {
        const itemType = u32()
        const n = Number(u64())
        return Array.from({ length: n }, () => value(itemType))
      }
      case 10:
        return u64()
      default:
        throw new Error(`value type ${type} not expected`)
    }
  }
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error('no GGUF magic')
  at = 4
  const version = u32()
  const tensorCount = Number(u64())
  const kvCount = Number(u64())
  const metadata = new Map<string, { type: number; value: Value }>()
  for (let i = 0; i < kvCount; i++) {
    const key = str()
    const type = u32()
    metadata.set(key, { type, value: value(type) })
  }
  const tensors: ReadGguf['tensors'] = []
  for (let i = 0; i < tensorCount; i++) {
    const name = str()
    const nd = u32()
    const dims = Array.from({ length: nd }, () => u64())
    tensors.push({ name, dims, type: u32(), offset: u64() })
  }
  const alignment = (metadata.get('general.alignment')?.value as number | undefined) ?? 32
  const dataOffset = Math.ceil(at / alignment) * alignment
  return { version, alignment, metadata, tensors, dataOffset, buf }
}

const bytesOf = (a: Float32Array | Uint16Array | Int8Array): Uint8Array =>
  new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

t.test('Q8_0 blocks: f16 scale max|x|/127, values roundf(x/d) with ties away from zero', async (t) => {
  // Block 0: max |x| = 127, so d = 1 exactly and q = roundf(x): 2.5 -> 3, -2.5 -> -3 (not -2), 0.49 -> 0.
  const b0 = [127, -2.5, 2.5, 0.49, -0.5, 0.5, -126.6, 1.5, ...Array<number>(24).fill(-1)]
  // Block 1: all zero: d = 0 and every q = 0.
  const b1 = Array<number>(32).fill(0)
  // Block 2: max |x| = 254, so d = 2: 3 -> 1.5 -> 2, -3 -> -2, 5 -> 2.5 -> 3, -1 -> -0.5 -> -1, 253 -> 126.5 -> 127.
  const b2 = [-254, 3, -3, 5, -1, 253, 0.9, ...Array<number>(25).fill(10)]
  const q = quantizeQ8_0(Float32Array.from([...b0, ...b1, ...b2]))
  t.equal(q.length, 3 * 34)
  const view = new DataView(q.buffer)
  const block = (b: number): { d: number; qs: number[] } => ({
    d: view.getUint16(b * 34, true),
    qs: Array.from({ length: 32 }, (_, j) => view.getInt8(b * 34 + 2 + j)),
  })
  t.same(block(0), { d: 0x3c00, qs: [127, -3, 3, 0, -1, 1, -127, 2, ...Array<number>(24).fill(-1)] })
  t.same(block(1), { d: 0, qs: Array<number>(32).fill(0) })
  t.same(block(2), { d: 0x4000, qs: [-127, 2, -2, 3, -1, 127, 0, ...Array<number>(25).fill(5)] })
  // A scale that is not a power of two: d = 1/127 in f32 stored as the nearest half (0x2008).
  const small = quantizeQ8_0(Float32Array.from({ length: 32 }, (_, j) => (j === 0 ? 1 : 0.5)))
  const smallView = new DataView(small.buffer)
  t.equal(smallView.getUint16(0, true), 0x2008, 'half of 1/127')
  t.equal(smallView.getInt8(2), 127)
  t.equal(smallView.getInt8(3), 64, '0.5 * 127 = 63.5 rounds away from zero')
  t.throws(() => quantizeQ8_0(new Float32Array(40)), /multiple of 32/)
})

t.test('header, metadata, tensor infos, alignment and data read back', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-gguf-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'x.gguf')
  const a = Float32Array.from({ length: 3 * 5 }, (_, i) => i - 7.25) // [3, 5]: 60 bytes, not a multiple of 32
  const b = Uint16Array.from({ length: 7 }, (_, i) => 0x3f80 + i) // bf16 [7]
  const c = Float32Array.from({ length: 2 * 64 }, (_, i) => Math.sin(i)) // Q8_0 [2, 64]
  const tensors: GgufTensor[] = [
    { name: 'a', shape: [3, 5], type: 'F32', data: () => bytesOf(a) },
    { name: 'b.weight', shape: [7], type: 'BF16', data: () => bytesOf(b) },
    { name: 'c', shape: [2, 64], type: 'Q8_0', data: () => quantizeQ8_0(c) },
  ]
  const layout = writeGguf(
    file,
    [
      ['general.architecture', { type: 'string', value: 'llama' }],
      ['general.alignment', { type: 'uint32', value: 64 }],
      ['x.i32', { type: 'int32', value: -5 }],
      ['x.f32', { type: 'float32', value: 1.5 }],
      ['x.bool', { type: 'bool', value: true }],
      ['x.u64', { type: 'uint64', value: 1n << 40n }],
      ['x.strings', { type: 'array', itemType: 'string', value: ['é', '', 'Ġthe'] }],
      ['x.ints', { type: 'array', itemType: 'int32', value: Int32Array.of(1, -2, 3) }],
    ],
    tensors,
    64,
  )
  const g = readGguf(file)
  t.equal(g.version, 3)
  t.equal(g.alignment, 64)
  t.equal(g.dataOffset, layout.dataOffset)
  t.equal(g.dataOffset % 64, 0, 'data section aligned')
  t.same(
    [...g.metadata.entries()].map(([k, v]) => [k, v.type, v.value]),
    [
      ['general.architecture', 8, 'llama'],
      ['general.alignment', 4, 64],
      ['x.i32', 5, -5],
      ['x.f32', 6, 1.5],
      ['x.bool', 7, true],
      ['x.u64', 10, 1n << 40n],
      ['x.strings', 9, ['é', '', 'Ġthe']],
      ['x.ints', 9, [1, -2, 3]],
    ],
  )
  t.same(
    g.tensors.map((x) => [x.name, x.dims.map(Number), x.type, Number(x.offset)]),
    [
      ['a', [5, 3], 0, 0], // ggml order: ne[0] is the row length
      ['b.weight', [7], 30, 64],
      ['c', [64, 2], 8, 128],
    ],
  )
  for (const x of g.tensors) t.equal(Number(x.offset) % 64, 0, `${x.name} aligned`)
  t.equal(g.buf.length, layout.bytes)
  t.equal(g.buf.length, g.dataOffset + 128 + 2 * 2 * 34 + (64 - ((2 * 2 * 34) % 64)), 'last tensor padded too')
  const at = (i: number): number => g.dataOffset + Number(g.tensors[i]!.offset)
  t.same(
    Array.from({ length: 15 }, (_, i) => g.buf.readFloatLE(at(0) + 4 * i)),
    Array.from(a),
  )
  t.same(
    Array.from({ length: 7 }, (_, i) => g.buf.readUInt16LE(at(1) + 2 * i)),
    Array.from(b),
  )
  t.same(g.buf.subarray(at(1) + 14, at(2)), Buffer.alloc(at(2) - at(1) - 14), 'padding is zeros')
  // Q8_0 rows dequantise to within half a step of the values.
  let worst = 0
  for (let blk = 0; blk < 4; blk++) {
    const o = at(2) + blk * 34
    const d = f16BitsToF32(g.buf.readUInt16LE(o))
    for (let j = 0; j < 32; j++) worst = Math.max(worst, Math.abs(d * g.buf.readInt8(o + 2 + j) - c[blk * 32 + j]!) / d)
  }
  t.ok(worst <= 0.5 + 1e-3, `Q8_0 error ${worst.toFixed(4)} steps`)

  t.throws(
    () =>
      writeGguf(
        path.join(dir, 'bad.gguf'),
        [],
        [{ name: 'a', shape: [3, 5], type: 'F32', data: () => new Uint8Array(4) }],
      ),
    /4 bytes, expected 60/,
  )
  t.throws(
    () => writeGguf(path.join(dir, 'bad.gguf'), [['general.alignment', { type: 'uint32', value: 32 }]], [], 64),
    /general.alignment/,
  )
})

t.test('RoPE permutation: HF row h*d + half*d/2 + i goes to h*d + 2i + half', async (t) => {
  // 2 heads of dim 4, 1 byte per row holding the HF row index.
  const out = permuteRopeRows(Uint8Array.from([0, 1, 2, 3, 4, 5, 6, 7]), 2, 4)
  t.same(Array.from(out), [0, 2, 1, 3, 4, 6, 5, 7])
  // Rows of 3 f32 move whole.
  const rows = Float32Array.from({ length: 4 * 3 }, (_, i) => i)
  const moved = new Float32Array(permuteRopeRows(new Uint8Array(rows.buffer), 1, 4).buffer)
  t.same(Array.from(moved), [0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11])
})

t.test('a testkit llama as GGUF: llama metadata, tokenizer, names, shapes, permuted q/k', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-gguf-llama-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const shape = { hiddenSize: 64, intermediateSize: 96, numLayers: 2, numHeads: 4, numKvHeads: 2, vocabSize: 600 }
  await buildModel(path.join(dir, 'f32'), { arch: 'llama', ...shape, tieWordEmbeddings: true, seed: 3 })
  await buildModel(path.join(dir, 'bf16'), {
    arch: 'llama',
    ...shape,
    tieWordEmbeddings: true,
    seed: 3,
    dtype: 'bfloat16',
  })
  const src = readSafetensors(path.join(dir, 'f32', 'model.safetensors')).tensors
  const srcBf16 = readSafetensors(path.join(dir, 'bf16', 'model.safetensors')).tensors

  writeLlamaGguf(path.join(dir, 'f32'), 'F32', path.join(dir, 'f32.gguf'))
  const g = readGguf(path.join(dir, 'f32.gguf'))
  const meta = (k: string): Value | undefined => g.metadata.get(k)?.value
  t.equal(meta('general.architecture'), 'llama')
  t.equal(meta('general.file_type'), 0)
  t.equal(meta('llama.embedding_length'), 64)
  t.equal(meta('llama.block_count'), 2)
  t.equal(meta('llama.feed_forward_length'), 96)
  t.equal(meta('llama.attention.head_count'), 4)
  t.equal(meta('llama.attention.head_count_kv'), 2)
  t.equal(meta('llama.rope.dimension_count'), 16)
  t.equal(meta('llama.context_length'), 512)
  t.equal(g.metadata.get('llama.attention.layer_norm_rms_epsilon')?.type, 6)
  t.equal(meta('tokenizer.ggml.model'), 'gpt2')
  const tokens = meta('tokenizer.ggml.tokens') as string[]
  const types = meta('tokenizer.ggml.token_type') as number[]
  t.equal(tokens.length, 600, 'tokens padded to vocab_size')
  t.equal(types.length, 600)
  t.equal(tokens[33], '!', 'byte-level tokens: id = byte, printable bytes as themselves')
  t.equal(tokens[32], 'Ġ', 'the space byte as GPT-2 maps it')
  t.equal(types[33], 1)
  t.equal(tokens[meta('tokenizer.ggml.bos_token_id') as number], '<|bos|>')
  t.equal(types[meta('tokenizer.ggml.eos_token_id') as number], 3, 'special tokens are control tokens')
  t.equal(tokens[599], '[PAD599]')
  t.equal(types[599], 5)
  t.ok((meta('tokenizer.ggml.merges') as string[]).every((m) => m.split(' ').length === 2))

  const names = g.tensors.map((x) => x.name)
  t.same(names.slice(0, 10), [
    'token_embd.weight',
    'blk.0.attn_norm.weight',
    'blk.0.attn_q.weight',
    'blk.0.attn_k.weight',
    'blk.0.attn_v.weight',
    'blk.0.attn_output.weight',
    'blk.0.ffn_norm.weight',
    'blk.0.ffn_gate.weight',
    'blk.0.ffn_up.weight',
    'blk.0.ffn_down.weight',
  ])
  t.equal(names[names.length - 1], 'output_norm.weight', 'tied: no output.weight')
  t.equal(names.length, 1 + 2 * 9 + 1)
  const info = (name: string): ReadGguf['tensors'][number] => g.tensors.find((x) => x.name === name)!
  t.same(info('token_embd.weight').dims.map(Number), [64, 600])
  t.same(info('blk.1.ffn_down.weight').dims.map(Number), [96, 64])
  t.same(info('blk.1.attn_k.weight').dims.map(Number), [64, 32])
  for (const x of g.tensors) t.equal(Number(x.offset) % 32, 0)

  const f32Rows = (name: string, rows: number, cols: number): number[][] => {
    const o = g.dataOffset + Number(info(name).offset)
    return Array.from({ length: rows }, (_, r) =>
      Array.from({ length: cols }, (_, c) => g.buf.readFloatLE(o + 4 * (r * cols + c))),
    )
  }
  const srcRows = (name: string, cols: number): number[][] => {
    const d = src.get(name)!.data
    return Array.from({ length: d.length / cols }, (_, r) => Array.from(d.subarray(r * cols, (r + 1) * cols)))
  }
  // q: head h, HF row h*16 + half*8 + i -> GGUF row h*16 + 2i + half; k the same over 2 heads.
  const q = f32Rows('blk.1.attn_q.weight', 64, 64)
  const hfQ = srcRows('model.layers.1.self_attn.q_proj.weight', 64)
  t.same(q[2 * 16 + 2 * 5 + 1], hfQ[2 * 16 + 8 + 5], 'q row moved per head')
  t.same(q[0], hfQ[0])
  const k = f32Rows('blk.0.attn_k.weight', 32, 64)
  const hfK = srcRows('model.layers.0.self_attn.k_proj.weight', 64)
  t.same(k[16 + 2 * 7], hfK[16 + 7], 'k row moved per kv head')
  t.same(f32Rows('blk.0.attn_v.weight', 32, 64), srcRows('model.layers.0.self_attn.v_proj.weight', 64), 'v as is')
  t.same(f32Rows('output_norm.weight', 1, 64)[0], Array.from(src.get('model.norm.weight')!.data))

  // BF16 from the bf16 folder keeps its bits (values equal the decoded source); norms stay F32.
  writeLlamaGguf(path.join(dir, 'bf16'), 'BF16', path.join(dir, 'bf16.gguf'))
  const h = readGguf(path.join(dir, 'bf16.gguf'))
  t.equal(h.metadata.get('general.file_type')?.value, 32)
  const hInfo = (name: string): ReadGguf['tensors'][number] => h.tensors.find((x) => x.name === name)!
  t.equal(hInfo('blk.0.ffn_up.weight').type, 30)
  t.equal(hInfo('blk.0.ffn_norm.weight').type, 0)
  const upAt = h.dataOffset + Number(hInfo('blk.0.ffn_up.weight').offset)
  const up = srcBf16.get('model.layers.0.mlp.up_proj.weight')!.data
  t.same(
    Array.from({ length: up.length }, (_, i) => bf16BitsToF32(h.buf.readUInt16LE(upAt + 2 * i))),
    Array.from(up),
  )

  // Q8_0 from the f32 folder: quantised weights (ggml type 8), F32 norms, quantization_version 2.
  writeLlamaGguf(path.join(dir, 'f32'), 'Q8_0', path.join(dir, 'q8.gguf'))
  const q8 = readGguf(path.join(dir, 'q8.gguf'))
  t.equal(q8.metadata.get('general.file_type')?.value, 7)
  t.equal(q8.metadata.get('general.quantization_version')?.value, 2)
  const q8Info = (name: string): ReadGguf['tensors'][number] => q8.tensors.find((x) => x.name === name)!
  t.equal(q8Info('token_embd.weight').type, 8)
  t.equal(q8Info('blk.1.attn_norm.weight').type, 0)
  const downAt = q8.dataOffset + Number(q8Info('blk.1.ffn_down.weight').offset)
  const down = Float32Array.from(src.get('model.layers.1.mlp.down_proj.weight')!.data)
  t.same(q8.buf.subarray(downAt, downAt + (down.length / 32) * 34), Buffer.from(quantizeQ8_0(down)))
})
