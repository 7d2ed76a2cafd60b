import t, { type Test } from 'tap'
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { SeededRandom } from '@loom/testkit'
import { SafetensorsFile } from '../../src/adapters/safetensors.ts'
import { crc32 } from '../../src/adapters/torch-bin/crc32.ts'
import { ALLOWED_GLOBALS } from '../../src/adapters/torch-bin/torch-allow-list.ts'
import { TorchStateDict } from '../../src/adapters/torch-bin/torch-state-dict.ts'
import { ZipArchive } from '../../src/adapters/torch-bin/zip-reader.ts'
import { LoomError } from '../../src/errors/index.ts'

/**
 * The restricted `.bin` reader on real `torch.save` archives (fixtures made by
 * tools/fixtures/make-torch-bin-fixture.py) and on hand-made hostile or damaged ones.
 */

const FIXTURES = join(import.meta.dirname, 'fixtures')
const BIN = join(FIXTURES, 'torch-bin')
/** What every hostile fixture's payload would create. */
const MARKER = '/tmp/loom-torch-bin-pwned'

const ctx = { id: 'my/adapter', file: 'adapter_model.bin' }

function expectInvalid(t: Test, run: () => unknown, fragment: string): LoomError | null {
  let err: unknown = null
  try {
    run()
  } catch (e) {
    err = e
  }
  t.ok(err instanceof LoomError && err.code === 'adapter_invalid', `adapter_invalid: ${String(err)}`)
  const message = (err as Error | null)?.message ?? ''
  t.ok(message.includes('my/adapter') && message.includes(fragment), `"${message}" mentions "${fragment}"`)
  return err instanceof LoomError ? err : null
}

// --- A stored-zip writer and a pickle builder, for archives torch would never write. ---

function u16(n: number): number[] {
  return [n & 0xff, (n >>> 8) & 0xff]
}
function u32(n: number): number[] {
  return [n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, (n >>> 24) & 0xff]
}

/** A zip of STORED entries (no ZIP64), as Python's zipfile would write it. */
function storedZip(files: Record<string, Uint8Array | string>): Uint8Array {
  const enc = new TextEncoder()
  const local: number[] = []
  const central: number[] = []
  let count = 0
  for (const [name, raw] of Object.entries(files)) {
    const body = typeof raw === 'string' ? enc.encode(raw) : raw
    const nameBytes = [...enc.encode(name)]
    const crc = crc32(body)
    const offset = local.length
    local.push(...u32(0x04034b50), ...u16(20), ...u16(0), ...u16(0), ...u16(0), ...u16(0))
    local.push(...u32(crc), ...u32(body.length), ...u32(body.length), ...u16(nameBytes.length), ...u16(0))
    local.push(...nameBytes, ...body)
    central.push(...u32(0x02014b50), ...u16(20), ...u16(20), ...u16(0), ...u16(0), ...u16(0), ...u16(0))
    central.push(...u32(crc), ...u32(body.length), ...u32(body.length), ...u16(nameBytes.length))
    central.push(...u16(0), ...u16(0), ...u16(0), ...u16(0), ...u32(0), ...u32(offset), ...nameBytes)
    count++
  }
  const end = [...u32(0x06054b50), ...u16(0), ...u16(0), ...u16(count), ...u16(count)]
  end.push(...u32(central.length), ...u32(local.length), ...u16(0))
  return new Uint8Array([...local, ...central, ...end])
}

/** Pickle bytes from opcode strings (latin1) and pre-encoded parts. */
function pickle(...parts: (string | number[])[]): Uint8Array {
  const out: number[] = []
  for (const p of parts) {
    if (typeof p === 'string') for (const ch of p) out.push(ch.charCodeAt(0))
    else out.push(...p)
  }
  return new Uint8Array(out)
}
const str = (s: string): number[] => {
  const b = [...new TextEncoder().encode(s)]
  return [0x58, ...u32(b.length), ...b] // BINUNICODE
}
const int1 = (n: number): number[] => [0x4b, n] // BININT1
const glob = (module: string, name: string): string => `c${module}\n${name}\n`
const PROTO2 = '\x80\x02'
/** `_rebuild_tensor_v2(('storage', FloatStorage, key, 'cpu', numel), offset, (size,), (1,), False, OrderedDict())` */
const tensor = (key: string, numel: number, offset: number, size: number): (string | number[])[] => [
  glob('torch._utils', '_rebuild_tensor_v2'),
  '((',
  str('storage'),
  glob('torch', 'FloatStorage'),
  str(key),
  str('cpu'),
  int1(numel),
  'tQ',
  int1(offset),
  int1(size),
  '\x85',
  int1(1),
  '\x85\x89',
  glob('collections', 'OrderedDict'),
  ')RtR',
]
const floats = (...v: number[]): Uint8Array => new Uint8Array(new Float32Array(v).buffer)
const archive = (pkl: Uint8Array, extra: Record<string, Uint8Array | string> = {}): Uint8Array =>
  storedZip({ 'archive/data.pkl': pkl, 'archive/version': '3\n', ...extra })

// --- Real torch.save archives. ---

t.test('a torch.save LoRA state dict gives exactly the tensors of its safetensors twin', async (t) => {
  const dir = join(FIXTURES, 'lora-tiny')
  const bin = await TorchStateDict.read(join(dir, 'adapter_model.bin'), 'my/adapter')
  const st = await SafetensorsFile.read(join(dir, 'adapter_model.safetensors'), 'my/adapter')
  t.same(bin.names(), st.names(), 'same names, same order')
  t.equal(bin.names().length, 14)
  for (const name of st.names()) {
    t.same(bin.shape(name), st.entry(name)!.shape, `${name} shape`)
    const mine = bin.float32(name)
    t.ok(mine instanceof Float32Array)
    t.same(Array.from(mine), Array.from(st.float32(name)), `${name} values`)
  }
})

t.test('strided and offset views are materialised in row-major order', async (t) => {
  const sd = await TorchStateDict.read(join(BIN, 'views.bin'), 'my/adapter')
  // Element (i, j) of the saved `big` is 10 i + j.
  const grid = (rows: number[], cols: number[]): number[] => rows.flatMap((i) => cols.map((j) => 10 * i + j))
  const range = (from: number, to: number, step = 1): number[] =>
    Array.from({ length: Math.ceil((to - from) / step) }, (_, k) => from + k * step)
  const expected: Record<string, [number[], number[]]> = {
    slice: [[4, 4], grid(range(1, 5), range(2, 9, 2))],
    transposed: [[4, 3], range(0, 4).flatMap((j) => range(0, 3).map((i) => 10 * i + j))],
    row: [[10], grid([3], range(0, 10))],
    column: [[6, 1], grid(range(0, 6), [7])],
    big: [[6, 10], range(0, 60)],
    half_slice: [[2, 2], grid([2, 3], [1, 4])],
  }
  t.same(sd.names(), Object.keys(expected))
  for (const [name, [shape, values]] of Object.entries(expected)) {
    t.same(sd.shape(name), shape, `${name} shape`)
    t.same(Array.from(sd.float32(name)), values, `${name} values`)
  }
  t.equal(sd.dtype('half_slice'), 'float16')
})

t.test('float32, float16, bfloat16, float64 and nn.Parameter, in pickle protocols 2 and 4', async (t) => {
  for (const file of ['dtypes.bin', 'dtypes-protocol4.bin']) {
    const sd = await TorchStateDict.read(join(BIN, file), 'my/adapter')
    t.same(sd.names(), ['f32', 'f16', 'bf16', 'f64', 'param'], file)
    t.same(
      sd.names().map((n) => sd.dtype(n)),
      ['float32', 'float16', 'bfloat16', 'float64', 'float32'],
    )
    for (const name of sd.names()) {
      t.same(sd.shape(name), [2, 3])
      t.same(Array.from(sd.float32(name)), [0, 0.25, 0.5, 0.75, 1, 1.25], `${file} ${name}`)
    }
  }
})

t.test("a Module's state_dict (an OrderedDict with _metadata set by BUILD) loads", async (t) => {
  const sd = await TorchStateDict.read(join(BIN, 'module-state-dict.bin'), 'my/adapter')
  t.same(sd.names(), ['weight', 'bias'])
  t.same(Array.from(sd.float32('weight')), [0, 1, 2, 3, 4, 5])
  t.same(Array.from(sd.float32('bias')), [0.5, -0.5])
})

// --- Hostile pickles. ---

t.test('pickles that call anything outside the allow-list are refused by name, and nothing runs', async (t) => {
  rmSync(MARKER, { force: true })
  const cases: [string, string][] = [
    ['malicious-os-system.bin', 'os.system'],
    ['malicious-posix-system.bin', 'posix.system'],
    ['malicious-eval.bin', 'builtins.eval'],
    ['malicious-eval-protocol4.bin', 'builtins.eval'],
    ['load-from-bytes.bin', 'torch.storage._load_from_bytes'],
  ]
  for (const [file, name] of cases) {
    const bytes = readFileSync(join(BIN, file))
    const err = expectInvalid(t, () => TorchStateDict.parse(bytes, ctx), `\`${name}\``)
    t.equal(
      err?.params.detail,
      `adapter_model.bin is not a plain state dict: pickle refers to \`${name}\`, which is not allowed`,
      file,
    )
  }
  t.notOk(existsSync(MARKER), `${MARKER} was not created`)
  t.notOk(ALLOWED_GLOBALS.includes('torch.storage._load_from_bytes'))
})

t.test('hand-made pickles: only allow-listed globals, calls, state and storages', async (t) => {
  const ok = archive(pickle(PROTO2, '}', str('w'), ...tensor('0', 4, 1, 3), 's.'), {
    'archive/data/0': floats(1, 2, 3, 4),
  })
  t.same(Array.from(TorchStateDict.parse(ok, ctx).float32('w')), [2, 3, 4], 'the builder makes a valid archive')

  const refused = (what: string, pkl: Uint8Array, fragment: string): void => {
    t.test(what, async (t) => {
      const err = expectInvalid(
        t,
        () => TorchStateDict.parse(archive(pkl, { 'archive/data/0': floats(1, 2, 3, 4) }), ctx),
        fragment,
      )
      t.match(err?.params.detail, /^adapter_model\.bin is not a plain state dict: /)
    })
  }
  refused('GLOBAL of subprocess', pickle(PROTO2, glob('subprocess', 'Popen'), '.'), 'refers to `subprocess.Popen`')
  refused('STACK_GLOBAL of builtins.exec', pickle('\x80\x04', str('builtins'), str('exec'), '\x93.'), '`builtins.exec`')
  refused(
    'INST of os.system',
    pickle(PROTO2, '(', str('id'), glob('os', 'system').replace('c', 'i'), '.'),
    '`os.system`',
  )
  refused(
    'calling a storage type',
    pickle(PROTO2, glob('torch', 'FloatStorage'), ')R.'),
    'pickle calls `torch.FloatStorage`, which is not allowed',
  )
  refused('calling a string', pickle(PROTO2, str('os.system'), ')R.'), 'pickle calls a string')
  refused(
    'NEWOBJ of a tensor rebuild',
    pickle(PROTO2, glob('torch._utils', '_rebuild_tensor_v2'), ')\x81.'),
    'instantiates `torch._utils._rebuild_tensor_v2`',
  )
  refused('BUILD on a plain dict', pickle(PROTO2, '}}b.'), 'sets the state of a dict')
  refused('a persistent id that is not a storage', pickle(PROTO2, str('x'), 'Q.'), 'persistent id that is a string')
  refused(
    'a storage id typed by a non-storage global',
    pickle(PROTO2, '(', str('storage'), glob('collections', 'OrderedDict'), str('0'), str('cpu'), int1(4), 'tQ.'),
    'not a torch storage class',
  )
  refused('a text opcode (protocol 0)', pickle('I1\n.'), 'INT (text) opcode')
  refused('an extension code', pickle(PROTO2, '\x82\x01.'), 'EXT1')
  refused('protocol 6', pickle('\x80\x06N.'), 'pickle protocol 6')
  refused('a list at the top', pickle(PROTO2, '].'), 'holds a list, not a dict of tensors')
  refused(
    'a value that is not a tensor',
    pickle(PROTO2, '}', str('w'), int1(3), 's.'),
    'w is an int or float, not a tensor',
  )
  refused(
    'backward hooks',
    pickle(PROTO2, '}', str('w'), ...tensor('0', 4, 0, 4).slice(0, -2), '}', str('h'), 'Ns', 'tR', 's.'),
    'backward hooks',
  )
})

// --- Damaged archives. ---

t.test('damaged or unsupported archives fail with one clear adapter_invalid', async (t) => {
  const good = readFileSync(join(FIXTURES, 'lora-tiny', 'adapter_model.bin'))

  expectInvalid(t, () => TorchStateDict.parse(good.subarray(0, good.length - 1), ctx), 'not a zip archive')
  expectInvalid(t, () => TorchStateDict.parse(good.subarray(0, 10), ctx), 'too short for a zip archive')
  expectInvalid(t, () => TorchStateDict.parse(new Uint8Array(0), ctx), 'too short')
  const st = readFileSync(join(FIXTURES, 'lora-tiny', 'adapter_model.safetensors'))
  expectInvalid(t, () => TorchStateDict.parse(st, ctx), 'is not a zip archive')
  // The pre-1.6 format starts with a pickled magic number.
  const legacy = pickle('\x80\x02\x8a\x0a', [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19], '.')
  expectInvalid(t, () => TorchStateDict.parse(legacy, ctx), 'legacy (torch < 1.6) format')

  // A flipped byte inside a tensor's data is caught by the entry's CRC.
  const storage = ZipArchive.parse(good).read('adapter_model/data/0')
  const flipped = Buffer.from(good)
  flipped[storage.byteOffset - good.byteOffset + 5]! ^= 0x40
  expectInvalid(t, () => TorchStateDict.parse(flipped, ctx), 'fails its CRC-32 check')

  // Compressed entries (method 8 in the central directory) are refused, not misread.
  const compressed = Buffer.from(good)
  const cd = compressed.indexOf(Buffer.from([0x50, 0x4b, 0x01, 0x02]))
  compressed.writeUInt16LE(8, cd + 10)
  expectInvalid(t, () => TorchStateDict.parse(compressed, ctx), 'is compressed (method 8, deflate)')

  const big = archive(pickle(PROTO2, '}.'), { 'archive/byteorder': 'big' })
  expectInvalid(t, () => TorchStateDict.parse(big, ctx), 'only little-endian archives are supported')
  const noPickle = storedZip({ 'archive/version': '3' })
  expectInvalid(t, () => TorchStateDict.parse(noPickle, ctx), 'no <folder>/data.pkl')
  const missing = archive(pickle(PROTO2, '}', str('w'), ...tensor('0', 4, 0, 4), 's.'))
  expectInvalid(t, () => TorchStateDict.parse(missing, ctx), 'the archive has no archive/data/0')
  const short = archive(pickle(PROTO2, '}', str('w'), ...tensor('0', 4, 0, 4), 's.'), { 'archive/data/0': floats(1) })
  expectInvalid(t, () => TorchStateDict.parse(short, ctx), 'storage 0 holds 4 bytes, but 4 float32 elements need 16')
  const outside = archive(pickle(PROTO2, '}', str('w'), ...tensor('0', 4, 2, 3), 's.'), {
    'archive/data/0': floats(1, 2, 3, 4),
  })
  expectInvalid(t, () => TorchStateDict.parse(outside, ctx), 'reaches element 4 of storage 0, which holds 4')
  const huge = archive(
    pickle(
      PROTO2,
      '}',
      str('w'),
      ...tensor('0', 4, 0, 4).slice(0, -6),
      [0x4a, ...u32(1 << 30)],
      '\x85',
      int1(0),
      '\x85\x89',
      glob('collections', 'OrderedDict'),
      ')RtR',
      's.',
    ),
    {
      'archive/data/0': floats(1, 2, 3, 4),
    },
  )
  expectInvalid(t, () => TorchStateDict.parse(huge, ctx), 'has more than 268435456 elements')
  const noStop = archive(pickle(PROTO2, '}'))
  expectInvalid(t, () => TorchStateDict.parse(noStop, ctx), 'ends without a STOP opcode')
  const badMemo = archive(pickle(PROTO2, 'h\x07.'))
  expectInvalid(t, () => TorchStateDict.parse(badMemo, ctx), 'memo entry 7')
  const unknownOp = archive(pickle(PROTO2, '\xff.'))
  expectInvalid(t, () => TorchStateDict.parse(unknownOp, ctx), 'unknown opcode 0xff')
})

t.test('every truncation and random corruption fails cleanly (or still loads), never with a stray error', async (t) => {
  const good = readFileSync(join(FIXTURES, 'lora-tiny', 'adapter_model.bin'))
  const attempt = (bytes: Uint8Array): 'ok' | 'invalid' | string => {
    try {
      const sd = TorchStateDict.parse(bytes, ctx)
      for (const n of sd.names()) sd.float32(n)
      return 'ok'
    } catch (err) {
      return err instanceof LoomError && err.code === 'adapter_invalid' ? 'invalid' : String(err)
    }
  }
  const stray: string[] = []
  for (let n = 0; n < good.length; n += 13) {
    const r = attempt(good.subarray(0, n))
    if (r !== 'invalid') stray.push(`truncated to ${n}: ${r}`)
  }
  const random = new SeededRandom(42)
  for (let i = 0; i < 400; i++) {
    const bytes = Buffer.from(good)
    for (let k = 0; k < 3; k++) bytes[Math.floor(random.next() * bytes.length)] = Math.floor(random.next() * 256)
    const r = attempt(bytes)
    if (r !== 'invalid' && r !== 'ok') stray.push(`corruption ${i}: ${r}`)
  }
  t.same(stray, [], 'only adapter_invalid errors')
})
