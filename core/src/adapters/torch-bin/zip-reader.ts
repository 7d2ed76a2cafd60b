/**
 * A small reader for the zip archives `torch.save` writes: entries are STORED (uncompressed), in
 * one file, optionally with ZIP64 records. It trusts nothing: every offset and size is checked
 * against the file, and every entry read is checked against its CRC-32, so a truncated or damaged
 * archive fails with one clear message. Compression, encryption and multi-disk archives are
 * refused: torch never writes them.
 */
import { crc32 } from './crc32.ts'
import { TorchBinError } from './torch-bin-error.ts'

const SIG_LOCAL = 0x04034b50
const SIG_CENTRAL = 0x02014b50
const SIG_EOCD = 0x06054b50
const SIG_EOCD64 = 0x06064b50
const SIG_EOCD64_LOCATOR = 0x07064b50
const EOCD_BYTES = 22
const MAX_COMMENT = 0xffff

const METHODS: Readonly<Record<number, string>> = { 8: 'deflate', 9: 'deflate64', 12: 'bzip2', 14: 'lzma', 93: 'zstd' }

/** One central-directory entry. */
export interface ZipEntry {
  readonly name: string
  readonly method: number
  readonly flags: number
  readonly crc: number
  readonly compressedSize: number
  readonly size: number
  readonly localHeaderOffset: number
}

function fail(detail: string): TorchBinError {
  return new TorchBinError(detail)
}

/** A validated zip archive held in memory. */
export class ZipArchive {
  private readonly bytes: Uint8Array
  private readonly view: DataView
  private readonly entries: ReadonlyMap<string, ZipEntry>

  private constructor(bytes: Uint8Array, entries: Map<string, ZipEntry>) {
    this.bytes = bytes
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    this.entries = entries
  }

  /** Parse the central directory. Throws `TorchBinError` when `bytes` is not a readable zip. */
  static parse(bytes: Uint8Array): ZipArchive {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    const eocd = findEndOfCentralDirectory(bytes, view)
    if (view.getUint16(eocd + 4, true) !== 0 || view.getUint16(eocd + 6, true) !== 0) {
      throw fail('the zip archive spans several disks, which is not supported')
    }
    let count = view.getUint16(eocd + 10, true)
    let cdSize = view.getUint32(eocd + 12, true)
    let cdOffset = view.getUint32(eocd + 16, true)
    // Saturated fields mean the real values are in the ZIP64 end record, found through its locator.
    if (count === 0xffff || cdSize === 0xffffffff || cdOffset === 0xffffffff) {
      const z = readZip64End(view, eocd)
      count = z.count
      cdSize = z.cdSize
      cdOffset = z.cdOffset
    }
    if (cdOffset + cdSize > eocd) {
      throw fail(`the central directory (${cdSize} bytes at ${cdOffset}) runs past the end record; truncated file?`)
    }
    const entries = new Map<string, ZipEntry>()
    let p = cdOffset
    for (let i = 0; i < count; i++) {
      if (p + 46 > cdOffset + cdSize || view.getUint32(p, true) !== SIG_CENTRAL) {
        throw fail(`central directory entry ${i} of ${count} is damaged`)
      }
      const flags = view.getUint16(p + 8, true)
      const method = view.getUint16(p + 10, true)
      const crc = view.getUint32(p + 16, true)
      let compressedSize = view.getUint32(p + 20, true)
      let size = view.getUint32(p + 24, true)
      const nameLen = view.getUint16(p + 28, true)
      const extraLen = view.getUint16(p + 30, true)
      const commentLen = view.getUint16(p + 32, true)
      const disk = view.getUint16(p + 34, true)
      let localHeaderOffset = view.getUint32(p + 42, true)
      const end = p + 46 + nameLen + extraLen + commentLen
      if (end > cdOffset + cdSize) throw fail(`central directory entry ${i} of ${count} runs past the directory`)
      const name = new TextDecoder('utf-8').decode(bytes.subarray(p + 46, p + 46 + nameLen))
      // ZIP64 extended information: 64-bit values for exactly the fields saturated above, in order.
      if (size === 0xffffffff || compressedSize === 0xffffffff || localHeaderOffset === 0xffffffff) {
        const extra = findExtra(view, p + 46 + nameLen, extraLen, 0x0001)
        if (extra === null) throw fail(`entry ${name} has saturated sizes but no ZIP64 extra field`)
        let q = extra.start
        const next = (): number => {
          if (q + 8 > extra.end) throw fail(`entry ${name} has a short ZIP64 extra field`)
          const v = safeU64(view, q, `entry ${name}`)
          q += 8
          return v
        }
        if (size === 0xffffffff) size = next()
        if (compressedSize === 0xffffffff) compressedSize = next()
        if (localHeaderOffset === 0xffffffff) localHeaderOffset = next()
      }
      if (disk !== 0 && disk !== 0xffff) throw fail(`entry ${name} lives on another disk`)
      if (entries.has(name)) throw fail(`the archive holds two entries named ${name}`)
      entries.set(name, { name, method, flags, crc, compressedSize, size, localHeaderOffset })
      p = end
    }
    return new ZipArchive(bytes, entries)
  }

  /** Entry names in directory order. */
  names(): string[] {
    return [...this.entries.keys()]
  }

  /** Whether an entry exists. */
  has(name: string): boolean {
    return this.entries.has(name)
  }

  /** An entry's size in bytes, or undefined. */
  sizeOf(name: string): number | undefined {
    return this.entries.get(name)?.size
  }

  /**
   * The bytes of a stored entry (a view into the archive, not a copy), checked against the entry's
   * CRC-32. Throws when the entry is missing, compressed, encrypted, out of bounds or corrupt.
   */
  read(name: string): Uint8Array {
    const e = this.entries.get(name)
    if (e === undefined) throw fail(`the archive has no entry ${name}`)
    if (e.flags & 0x1) throw fail(`entry ${name} is encrypted`)
    if (e.method !== 0) {
      throw fail(
        `entry ${name} is compressed (method ${e.method}${METHODS[e.method] ? `, ${METHODS[e.method]}` : ''}); ` +
          'torch.save writes stored (uncompressed) entries, and only those are supported',
      )
    }
    if (e.compressedSize !== e.size) throw fail(`stored entry ${name} has different compressed and plain sizes`)
    const h = e.localHeaderOffset
    if (h + 30 > this.bytes.length || this.view.getUint32(h, true) !== SIG_LOCAL) {
      throw fail(`the local header of entry ${name} is missing or damaged; truncated file?`)
    }
    const start = h + 30 + this.view.getUint16(h + 26, true) + this.view.getUint16(h + 28, true)
    if (start + e.size > this.bytes.length) {
      throw fail(`entry ${name} (${e.size} bytes at ${start}) runs past the end of the file; truncated file?`)
    }
    const data = this.bytes.subarray(start, start + e.size)
    if (crc32(data) !== e.crc) throw fail(`entry ${name} fails its CRC-32 check; the file is corrupt`)
    return data
  }
}

function findEndOfCentralDirectory(bytes: Uint8Array, view: DataView): number {
  if (bytes.length < EOCD_BYTES) throw fail(`file is ${bytes.length} bytes, too short for a zip archive`)
  const lowest = Math.max(0, bytes.length - EOCD_BYTES - MAX_COMMENT)
  for (let p = bytes.length - EOCD_BYTES; p >= lowest; p--) {
    // The record's comment must end exactly at the end of the file, which rules out stray signatures.
    if (view.getUint32(p, true) === SIG_EOCD && p + EOCD_BYTES + view.getUint16(p + 20, true) === bytes.length) {
      return p
    }
  }
  throw fail('no zip end-of-central-directory record: the file is truncated or is not a zip archive')
}

function readZip64End(view: DataView, eocd: number): { count: number; cdSize: number; cdOffset: number } {
  const loc = eocd - 20
  if (loc < 0 || view.getUint32(loc, true) !== SIG_EOCD64_LOCATOR) {
    throw fail('the end record points to ZIP64 records, but there is no ZIP64 locator')
  }
  const at = safeU64(view, loc + 8, 'the ZIP64 locator')
  if (at + 56 > loc || view.getUint32(at, true) !== SIG_EOCD64) throw fail('the ZIP64 end record is missing or damaged')
  if (view.getUint32(at + 16, true) !== 0 || view.getUint32(at + 20, true) !== 0) {
    throw fail('the zip archive spans several disks, which is not supported')
  }
  return {
    count: safeU64(view, at + 32, 'the ZIP64 end record'),
    cdSize: safeU64(view, at + 40, 'the ZIP64 end record'),
    cdOffset: safeU64(view, at + 48, 'the ZIP64 end record'),
  }
}

function safeU64(view: DataView, at: number, where: string): number {
  const v = view.getBigUint64(at, true)
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw fail(`${where} holds an impossible 64-bit size (${v})`)
  return Number(v)
}

function findExtra(view: DataView, start: number, length: number, id: number): { start: number; end: number } | null {
  let p = start
  const end = start + length
  while (p + 4 <= end) {
    const tag = view.getUint16(p, true)
    const size = view.getUint16(p + 2, true)
    if (p + 4 + size > end) return null
    if (tag === id) return { start: p + 4, end: p + 4 + size }
    p += 4 + size
  }
  return null
}
