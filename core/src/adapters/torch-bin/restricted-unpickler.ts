/**
 * A pickle interpreter that never executes anything. It reads the opcodes of protocols 2–5 (the
 * ones `torch.save` and `pickle.dumps` emit; the text opcodes of protocols 0–1 are refused) and
 * builds inert values. Everything that would run code in Python goes through the policy: GLOBAL
 * and STACK_GLOBAL resolve only allow-listed names (anything else is refused on sight, naming it,
 * before it could be called), REDUCE and NEWOBJ call only what an allowed global offers, BUILD is
 * the policy's decision, and persistent ids are the policy's to load. Extensions, out-of-band
 * buffers and oversized integers are refused. Mirrors torch's `_weights_only_unpickler.py`.
 */
import {
  describePickleValue,
  PickleDict,
  PickleSet,
  PickleTuple,
  type PickleGlobal,
  type PickleKey,
  type PickleValue,
} from './pickle-values.ts'
import { TorchBinError } from './torch-bin-error.ts'

/** What the unpickler may do beyond building plain data. */
export interface UnpicklePolicy {
  /** The global `module.name` if it is allowed, else undefined (the pickle is then refused). */
  resolveGlobal(module: string, name: string): PickleGlobal | undefined
  /** Resolve a BINPERSID id (torch: a storage); throw to refuse it. */
  persistentLoad(pid: PickleValue): PickleValue
  /** BUILD: apply `state` to `target`; throw to refuse. */
  build(target: PickleValue, state: PickleValue): void
}

// Python 2 module names that protocol-2 pickles carry and Python 3 maps on load (`fix_imports`):
// a protocol-2 `eval` is `__builtin__.eval`, and is reported as what it loads, `builtins.eval`.
const PY2_MODULES: Readonly<Record<string, string>> = { __builtin__: 'builtins', copy_reg: 'copyreg' }

/** Integers wider than this many bytes are refused (torch writes at most 8; bigint parsing is quadratic). */
const MAX_LONG_BYTES = 64

// Opcode → name, for the opcodes that are recognised but refused (messages name them).
const REFUSED_OPCODES: Readonly<Record<number, string>> = {
  0x46: 'FLOAT (text)',
  0x49: 'INT (text)',
  0x4c: 'LONG (text)',
  0x50: 'PERSID (text)',
  0x53: 'STRING (text)',
  0x56: 'UNICODE (text)',
  0x67: 'GET (text)',
  0x70: 'PUT (text)',
  0x82: 'EXT1',
  0x83: 'EXT2',
  0x84: 'EXT4',
  0x97: 'NEXT_BUFFER',
  0x98: 'READONLY_BUFFER',
}

const refuse = (detail: string): TorchBinError => new TorchBinError(detail, { refused: true })
const damaged = (detail: string): TorchBinError => new TorchBinError(`data.pkl: ${detail}`)

const isKey = (v: PickleValue): v is PickleKey =>
  v === null ||
  typeof v === 'boolean' ||
  typeof v === 'number' ||
  typeof v === 'bigint' ||
  typeof v === 'string' ||
  v instanceof PickleTuple

const isGlobal = (v: PickleValue): v is PickleGlobal =>
  typeof v === 'object' && v !== null && !Array.isArray(v) && 'kind' in v && v.kind === 'global'

/** Unpickle `bytes` under `policy`. Throws `TorchBinError` (refused, or damaged) and nothing else. */
export function restrictedUnpickle(bytes: Uint8Array, policy: UnpicklePolicy): PickleValue {
  return new Unpickler(bytes, policy).run()
}

class Unpickler {
  private pos = 0
  private stack: PickleValue[] = []
  private readonly marks: PickleValue[][] = []
  private readonly memo = new Map<number, PickleValue>()
  private readonly view: DataView
  private readonly utf8 = new TextDecoder('utf-8', { fatal: true })

  constructor(
    private readonly bytes: Uint8Array,
    private readonly policy: UnpicklePolicy,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  }

  run(): PickleValue {
    for (;;) {
      if (this.pos >= this.bytes.length) throw damaged('the pickle ends without a STOP opcode; truncated?')
      const at = this.pos
      const op = this.bytes[this.pos++]!
      if (op === 0x2e /* STOP */) {
        if (this.stack.length !== 1 || this.marks.length !== 0) throw damaged('STOP with an unbalanced stack')
        return this.stack[0]!
      }
      this.step(op, at)
    }
  }

  // One opcode. Grouped as in CPython's pickle.py: framing, constants, strings, containers, memo,
  // then the opcodes that would call code in Python.
  private step(op: number, at: number): void {
    switch (op) {
      case 0x80 /* PROTO */: {
        const proto = this.u8()
        if (proto < 2 || proto > 5) throw refuse(`pickle protocol ${proto} is not supported (2 to 5 are)`)
        return
      }
      case 0x95 /* FRAME */:
        this.take(8) // a size hint; the whole pickle is already in memory
        return
      case 0x28 /* MARK */:
        this.marks.push(this.stack)
        this.stack = []
        return
      case 0x30 /* POP */:
        if (this.stack.length > 0) this.pop()
        else this.popMark()
        return
      case 0x31 /* POP_MARK */:
        this.popMark()
        return
      case 0x32 /* DUP */:
        this.push(this.top())
        return

      case 0x4e /* NONE */:
        return this.push(null)
      case 0x88 /* NEWTRUE */:
        return this.push(true)
      case 0x89 /* NEWFALSE */:
        return this.push(false)
      case 0x4a /* BININT */:
        return this.push(this.view.getInt32(this.take(4), true))
      case 0x4b /* BININT1 */:
        return this.push(this.u8())
      case 0x4d /* BININT2 */:
        return this.push(this.view.getUint16(this.take(2), true))
      case 0x8a /* LONG1 */:
        return this.push(this.long(this.u8()))
      case 0x8b /* LONG4 */:
        return this.push(this.long(this.u32()))
      case 0x47 /* BINFLOAT */:
        return this.push(this.view.getFloat64(this.take(8), false))

      case 0x58 /* BINUNICODE */:
        return this.push(this.text(this.u32()))
      case 0x8c /* SHORT_BINUNICODE */:
        return this.push(this.text(this.u8()))
      case 0x8d /* BINUNICODE8 */:
        return this.push(this.text(this.u64()))
      case 0x54 /* BINSTRING */:
        return this.push(this.ascii(this.view.getInt32(this.take(4), true)))
      case 0x55 /* SHORT_BINSTRING */:
        return this.push(this.ascii(this.u8()))
      case 0x42 /* BINBYTES */:
        return this.push(this.slice(this.u32()))
      case 0x43 /* SHORT_BINBYTES */:
        return this.push(this.slice(this.u8()))
      case 0x8e /* BINBYTES8 */:
      case 0x96 /* BYTEARRAY8 */:
        return this.push(this.slice(this.u64()))

      case 0x29 /* EMPTY_TUPLE */:
        return this.push(new PickleTuple([]))
      case 0x85 /* TUPLE1 */:
      case 0x86 /* TUPLE2 */:
      case 0x87 /* TUPLE3 */: {
        const n = op - 0x84
        if (this.stack.length < n) throw damaged(`TUPLE${n} at byte ${at} with ${this.stack.length} items on the stack`)
        return this.push(new PickleTuple(this.stack.splice(this.stack.length - n, n)))
      }
      case 0x74 /* TUPLE */:
        return this.push(new PickleTuple(this.popMark()))
      case 0x5d /* EMPTY_LIST */:
        return this.push([])
      case 0x6c /* LIST */:
        return this.push(this.popMark())
      case 0x61 /* APPEND */: {
        const item = this.pop()
        this.listAt(at).push(item)
        return
      }
      case 0x65 /* APPENDS */: {
        const items = this.popMark()
        this.listAt(at).push(...items)
        return
      }
      case 0x7d /* EMPTY_DICT */:
        return this.push(new PickleDict(false))
      case 0x64 /* DICT */: {
        const d = new PickleDict(false)
        this.setItems(d, this.popMark(), at)
        return this.push(d)
      }
      case 0x73 /* SETITEM */: {
        const value = this.pop()
        const key = this.pop()
        this.setItems(this.dictAt(at), [key, value], at)
        return
      }
      case 0x75 /* SETITEMS */: {
        const items = this.popMark()
        this.setItems(this.dictAt(at), items, at)
        return
      }
      case 0x8f /* EMPTY_SET */:
        return this.push(new PickleSet(false))
      case 0x90 /* ADDITEMS */: {
        const items = this.popMark()
        const set = this.top()
        if (!(set instanceof PickleSet) || set.frozen) throw damaged(`ADDITEMS at byte ${at} on something not a set`)
        set.items.push(...items)
        return
      }
      case 0x91 /* FROZENSET */: {
        const set = new PickleSet(true)
        set.items.push(...this.popMark())
        return this.push(set)
      }

      case 0x71 /* BINPUT */:
        return this.put(this.u8())
      case 0x72 /* LONG_BINPUT */:
        return this.put(this.u32())
      case 0x94 /* MEMOIZE */:
        return this.put(this.memo.size)
      case 0x68 /* BINGET */:
        return this.get(this.u8(), at)
      case 0x6a /* LONG_BINGET */:
        return this.get(this.u32(), at)

      case 0x63 /* GLOBAL */: {
        const module = this.line()
        const name = this.line()
        return this.push(this.global(module, name))
      }
      case 0x93 /* STACK_GLOBAL */: {
        const name = this.pop()
        const module = this.pop()
        if (typeof module !== 'string' || typeof name !== 'string') {
          throw damaged(`STACK_GLOBAL at byte ${at} with a non-string module or name`)
        }
        return this.push(this.global(module, name))
      }
      case 0x69 /* INST: the class is named inline; only an allowed one gets this far */: {
        const cls = this.global(this.line(), this.line())
        return this.push(this.construct(cls, this.popMark(), 'INST'))
      }
      case 0x6f /* OBJ */: {
        const [cls, ...args] = this.popMark()
        return this.push(this.construct(cls ?? null, args, 'OBJ'))
      }
      case 0x52 /* REDUCE */: {
        const args = this.pop()
        const fn = this.pop()
        if (!(args instanceof PickleTuple)) throw damaged(`REDUCE at byte ${at} with arguments that are not a tuple`)
        if (!isGlobal(fn)) throw refuse(`pickle calls ${describePickleValue(fn)}, which is not callable`)
        if (fn.call === undefined) throw refuse(`pickle calls \`${fn.qualname}\`, which is not allowed`)
        return this.push(fn.call(args.items))
      }
      case 0x81 /* NEWOBJ */: {
        const args = this.pop()
        const cls = this.pop()
        if (!(args instanceof PickleTuple)) throw damaged(`NEWOBJ at byte ${at} with arguments that are not a tuple`)
        return this.push(this.construct(cls, args.items, 'NEWOBJ'))
      }
      case 0x92 /* NEWOBJ_EX */: {
        const kwargs = this.pop()
        const args = this.pop()
        const cls = this.pop()
        if (!(args instanceof PickleTuple) || !(kwargs instanceof PickleDict)) {
          throw damaged(`NEWOBJ_EX at byte ${at} with malformed arguments`)
        }
        if (kwargs.map.size > 0)
          throw refuse('pickle constructs an object with keyword arguments, which is not allowed')
        return this.push(this.construct(cls, args.items, 'NEWOBJ_EX'))
      }
      case 0x62 /* BUILD */: {
        const state = this.pop()
        this.policy.build(this.top(), state)
        return
      }
      case 0x51 /* BINPERSID */:
        return this.push(this.policy.persistentLoad(this.pop()))

      default: {
        const name = REFUSED_OPCODES[op]
        if (name !== undefined) throw refuse(`pickle uses the ${name} opcode, which is not supported`)
        throw damaged(`unknown opcode 0x${op.toString(16).padStart(2, '0')} at byte ${at}; corrupt pickle?`)
      }
    }
  }

  private global(rawModule: string, name: string): PickleGlobal {
    const module = PY2_MODULES[rawModule] ?? rawModule
    const g = this.policy.resolveGlobal(module, name)
    if (g === undefined) throw refuse(`pickle refers to \`${module}.${name}\`, which is not allowed`)
    return g
  }

  private construct(cls: PickleValue, args: readonly PickleValue[], opcode: string): PickleValue {
    if (!isGlobal(cls))
      throw refuse(`pickle instantiates ${describePickleValue(cls)} (${opcode}), which is not a class`)
    if (cls.construct === undefined) throw refuse(`pickle instantiates \`${cls.qualname}\`, which is not allowed`)
    return cls.construct(args)
  }

  private setItems(d: PickleDict, items: readonly PickleValue[], at: number): void {
    if (items.length % 2 !== 0) throw damaged(`SETITEMS at byte ${at} with an odd number of items`)
    for (let i = 0; i < items.length; i += 2) {
      const key = items[i]!
      if (!isKey(key)) throw damaged(`dict key ${describePickleValue(key)} at byte ${at} is not hashable`)
      d.map.set(key, items[i + 1]!)
    }
  }

  private listAt(at: number): PickleValue[] {
    const list = this.top()
    if (!Array.isArray(list)) throw refuse(`pickle appends to ${describePickleValue(list)} at byte ${at}, not a list`)
    return list
  }

  private dictAt(at: number): PickleDict {
    const d = this.top()
    if (!(d instanceof PickleDict))
      throw refuse(`pickle sets items on ${describePickleValue(d)} at byte ${at}, not a dict`)
    return d
  }

  private put(index: number): void {
    this.memo.set(index, this.top())
  }

  private get(index: number, at: number): void {
    const v = this.memo.get(index)
    if (v === undefined) throw damaged(`memo entry ${index} read at byte ${at} was never written`)
    this.push(v)
  }

  private push(v: PickleValue): void {
    this.stack.push(v)
  }

  private pop(): PickleValue {
    if (this.stack.length === 0) throw damaged(`stack underflow at byte ${this.pos - 1}`)
    return this.stack.pop()!
  }

  private top(): PickleValue {
    if (this.stack.length === 0) throw damaged(`stack underflow at byte ${this.pos - 1}`)
    return this.stack[this.stack.length - 1]!
  }

  private popMark(): PickleValue[] {
    const items = this.stack
    const outer = this.marks.pop()
    if (outer === undefined) throw damaged(`no MARK before byte ${this.pos - 1}`)
    this.stack = outer
    return items
  }

  /** Advance by `n` bytes, returning where they start. */
  private take(n: number): number {
    if (n > this.bytes.length - this.pos) {
      throw damaged(`a ${n}-byte argument at byte ${this.pos} runs past the end of the pickle; truncated?`)
    }
    const at = this.pos
    this.pos += n
    return at
  }

  private u8(): number {
    return this.bytes[this.take(1)]!
  }

  private u32(): number {
    return this.view.getUint32(this.take(4), true)
  }

  private u64(): number {
    const v = this.view.getBigUint64(this.take(8), true)
    if (v > BigInt(this.bytes.length)) throw damaged(`a length of ${v} at byte ${this.pos - 8} exceeds the pickle`)
    return Number(v)
  }

  private slice(n: number): Uint8Array {
    const at = this.take(n)
    return this.bytes.slice(at, at + n)
  }

  private text(n: number): string {
    const at = this.take(n)
    return this.decode(at, at + n, 'string')
  }

  /** Protocol-2 byte strings; Python 3 reads them as ASCII by default, and so do we. */
  private ascii(n: number): string {
    if (n < 0) throw damaged(`negative string length at byte ${this.pos - 4}`)
    const at = this.take(n)
    if (this.bytes.subarray(at, at + n).some((b) => b >= 0x80)) throw damaged(`byte string at byte ${at} is not ASCII`)
    return this.decode(at, at + n, 'byte string')
  }

  /** A newline-terminated name (GLOBAL and INST arguments). */
  private line(): string {
    const end = this.bytes.indexOf(0x0a, this.pos)
    if (end < 0) throw damaged(`unterminated name at byte ${this.pos}`)
    const at = this.take(end - this.pos)
    this.pos++ // the newline
    return this.decode(at, end, 'name')
  }

  private decode(from: number, to: number, what: string): string {
    try {
      return this.utf8.decode(this.bytes.subarray(from, to))
    } catch {
      throw damaged(`${what} at byte ${from} is not valid UTF-8`)
    }
  }

  /** A little-endian two's-complement integer of `n` bytes: a number when it is safe, else a bigint. */
  private long(n: number): number | bigint {
    if (n > MAX_LONG_BYTES)
      throw refuse(`pickle holds a ${n}-byte integer; at most ${MAX_LONG_BYTES} bytes are accepted`)
    const at = this.take(n)
    if (n === 0) return 0
    let v = 0n
    for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(this.bytes[at + i]!)
    if (this.bytes[at + n - 1]! & 0x80) v -= 1n << BigInt(8 * n)
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v
  }
}
