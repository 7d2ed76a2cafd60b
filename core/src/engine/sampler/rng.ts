/**
 * The per-request random stream. Each request owns one generator seeded from its 64-bit seed, so
 * its samples depend only on that seed and on how many draws it has made — never on which other
 * requests share its batch.
 */

const MASK64 = (1n << 64n) - 1n

/** SplitMix64 (Steele, Lea, Flood 2014): expands one 64-bit seed into well-mixed state words. */
export class SplitMix64 {
  private state: bigint

  constructor(seed: bigint) {
    this.state = seed & MASK64
  }

  next(): bigint {
    this.state = (this.state + 0x9e3779b97f4a7c15n) & MASK64
    let z = this.state
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64
    return z ^ (z >> 31n)
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0
}

/**
 * xoshiro128** 1.0 (Blackman, Vigna): 32-bit outputs, 128-bit state, all in Number arithmetic
 * (BigInt is used only while seeding). The state is seeded by two SplitMix64 outputs.
 */
export class Xoshiro128StarStar {
  private s0: number
  private s1: number
  private s2: number
  private s3: number

  constructor(seed: bigint) {
    const mix = new SplitMix64(seed)
    const a = mix.next()
    const b = mix.next()
    this.s0 = Number(a & 0xffffffffn)
    this.s1 = Number(a >> 32n)
    this.s2 = Number(b & 0xffffffffn)
    this.s3 = Number(b >> 32n)
    // The all-zero state is the generator's one fixed point.
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1
  }

  /** An independent generator in this one's current state. */
  clone(): Xoshiro128StarStar {
    const copy = Object.create(Xoshiro128StarStar.prototype) as Xoshiro128StarStar
    copy.s0 = this.s0
    copy.s1 = this.s1
    copy.s2 = this.s2
    copy.s3 = this.s3
    return copy
  }

  /** Next uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5) >>> 0, 7), 9) >>> 0
    const t = (this.s1 << 9) >>> 0
    this.s2 = (this.s2 ^ this.s0) >>> 0
    this.s3 = (this.s3 ^ this.s1) >>> 0
    this.s1 = (this.s1 ^ this.s2) >>> 0
    this.s0 = (this.s0 ^ this.s3) >>> 0
    this.s2 = (this.s2 ^ t) >>> 0
    this.s3 = rotl(this.s3, 11)
    return result
  }

  /** Uniform double in [0, 1) with 53 random bits (two draws). */
  nextFloat(): number {
    const hi = this.nextUint32() >>> 5 // 27 bits
    const lo = this.nextUint32() >>> 6 // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992
  }
}
