/**
 * Which steps run on the JS thread (`NativeRuntime.stepNow`) instead of a libuv worker.
 *
 * Handing a step to a worker and back costs two thread wake-ups: the worker's, then the JS
 * thread's when the step completes. On a 2-core VM that was ~40-70 µs a step against a demo-model
 * decode step of ~100 µs of compute (captured steps replayed: native time against wall time). A
 * step on the JS thread blocks HTTP and streaming for its whole duration, though, so only steps
 * predicted to take at most `maxUs` run there.
 *
 * The prediction: the wall time last measured for a step of about as many tokens (within a
 * power of two), scaled up when this step has more tokens than that one. Never measured: the
 * nearest smaller size's time scaled up by the token count, an overestimate (step time at small
 * sizes is mostly fixed cost), so a wrong guess errs toward a worker; no smaller size either (the
 * first step): a worker. Every step is measured, wherever it ran, so a size whose steps grow
 * (longer contexts, more adapters) moves to a worker when they pass the bound.
 */
export class InlineStepPolicy {
  /** By size class (`sizeClass`): the last step's wall time (µs) and tokens; absent: none yet. */
  private readonly lastUs: number[] = []
  private readonly lastTokens: number[] = []

  /** @param maxUs longest predicted step (µs) to run on the JS thread; 0: none. */
  constructor(private readonly maxUs: number) {}

  /** Whether a step of `tokens` tokens runs on the JS thread. */
  inline(tokens: number): boolean {
    if (this.maxUs <= 0) return false
    return this.predictUs(tokens) <= this.maxUs
  }

  /** A step of `tokens` tokens took `us` microseconds of wall time, wherever it ran. */
  record(tokens: number, us: number): void {
    if (!(us >= 0)) return
    const b = sizeClass(tokens)
    this.lastUs[b] = us
    this.lastTokens[b] = Math.max(1, tokens)
  }

  /** Predicted wall time (µs) of a step of `tokens` tokens; Infinity when nothing to go by. */
  predictUs(tokens: number): number {
    const t = Math.max(1, tokens)
    for (let b = sizeClass(t); b >= 0; b--) {
      const us = this.lastUs[b]
      if (us !== undefined) return us * Math.max(1, t / this.lastTokens[b]!)
    }
    return Number.POSITIVE_INFINITY
  }
}

/** A step's size class: steps of 1, 2-3, 4-7, 8-15, ... tokens. */
function sizeClass(tokens: number): number {
  return Math.floor(Math.log2(Math.max(1, tokens)))
}
