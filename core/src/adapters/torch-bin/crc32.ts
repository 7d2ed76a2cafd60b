/**
 * CRC-32 (IEEE 802.3, the zip checksum). Node 20 has no `zlib.crc32`, and a damaged archive must
 * be caught before its bytes become weights.
 */

let table: Uint32Array | null = null

function crcTable(): Uint32Array {
  if (table !== null) return table
  const t = new Uint32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    t[n] = c >>> 0
  }
  table = t
  return t
}

/** The CRC-32 of `bytes`, as an unsigned 32-bit number. */
export function crc32(bytes: Uint8Array): number {
  const t = crcTable()
  let c = 0xffffffff
  for (let i = 0; i < bytes.length; i++) c = t[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}
