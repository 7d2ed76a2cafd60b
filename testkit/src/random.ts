/**
 * A small seeded random source so every fixture the test kit writes is byte-for-byte reproducible
 * from its seed (Math.random is never used).
 */
export class SeededRandom {
  private state: number

  constructor(seed: number) {
    // Mix the seed so that nearby seeds (0, 1, 2) give unrelated streams.
    this.state = (Math.imul((seed | 0) ^ 0x9e3779b9, 0x85ebca6b) ^ 0xc2b2ae35) >>> 0
  }

  /** Uniform in [0, 1) (mulberry32). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0
    let t = this.state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n)
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    let u = this.next()
    while (u <= 1e-12) u = this.next()
    const v = this.next()
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v)
  }

  /** `n` values drawn from N(mean, std²). */
  normalArray(n: number, std: number, mean = 0): Float32Array {
    const out = new Float32Array(n)
    for (let i = 0; i < n; i++) out[i] = mean + std * this.normal()
    return out
  }
}
