/** A download in flight as `/v1/models/{id}` and the log show it. */
export interface DownloadStatus {
  readonly source: string
  readonly id: string
  readonly revision: string
  /** Bytes on disk so far. */
  readonly bytes: number
  /** Bytes the source promised (0 when it gave no sizes). */
  readonly totalBytes: number
  /** Whole percent, or null without a total. */
  readonly percent: number | null
  /** Mean rate since the download started, bytes per second. */
  readonly bytesPerSecond: number
  /** Seconds left at that rate, or null without a total or before any byte arrived. */
  readonly etaSeconds: number | null
  readonly startedAt: string
}

/**
 * The progress of one adapter download: the byte count observed from time to time (the cache
 * measures the temporary directory; sources need not report anything), and what follows from it.
 */
export class DownloadProgress {
  readonly #what: { source: string; id: string; revision: string }
  readonly #total: number
  readonly #startedMs: number
  readonly #now: () => number
  #bytes = 0

  constructor(
    what: { source: string; id: string; revision: string },
    totalBytes: number,
    now: () => number = () => performance.timeOrigin + performance.now(),
  ) {
    this.#what = what
    this.#total = totalBytes
    this.#now = now
    this.#startedMs = now()
  }

  /** Record the bytes on disk now (never goes back: a retried file does not undo progress shown). */
  observe(bytes: number): void {
    this.#bytes = Math.max(this.#bytes, bytes)
  }

  status(): DownloadStatus {
    const elapsedS = Math.max(1e-3, (this.#now() - this.#startedMs) / 1000)
    const rate = this.#bytes / elapsedS
    const left = Math.max(0, this.#total - this.#bytes)
    return {
      ...this.#what,
      bytes: this.#bytes,
      totalBytes: this.#total,
      percent: this.#total > 0 ? Math.min(100, Math.floor((100 * this.#bytes) / this.#total)) : null,
      bytesPerSecond: Math.round(rate),
      etaSeconds: this.#total > 0 && rate > 0 ? Math.ceil(left / rate) : null,
      startedAt: new Date(this.#startedMs).toISOString(),
    }
  }
}
