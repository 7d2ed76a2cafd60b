/**
 * A downloaded file is not what the source promised: the wrong size or the wrong SHA-256. Worth
 * another try from the start (the bytes were damaged or cut on the way), never a resume.
 */
export class DownloadCheckError extends Error {
  override readonly name = 'DownloadCheckError'
  /** Which promise was broken. */
  readonly check: 'size' | 'sha256'
  /** The listed size in bytes, or the listed lower-case hex SHA-256. */
  readonly expected: number | string
  /**
   * What arrived: the size in bytes (for a body longer than promised, the bytes received when the
   * download was cut, so a lower bound), or the SHA-256 of what is on disk.
   */
  readonly actual: number | string

  /** `name` is the file as messages call it (its path inside the adapter). */
  constructor(name: string, check: 'size', expected: number, actual: number)
  constructor(name: string, check: 'sha256', expected: string, actual: string)
  constructor(name: string, check: 'size' | 'sha256', expected: number | string, actual: number | string) {
    super(
      check === 'size'
        ? `${name} has ${actual} bytes, expected ${expected}`
        : `${name} has SHA-256 ${actual}, expected ${expected}`,
    )
    this.check = check
    this.expected = expected
    this.actual = actual
  }
}

/**
 * No data arrived for `idleMs` in the middle of a body: the transfer stalled. Its `name` is
 * `TimeoutError`, like the error of `AbortSignal.timeout()`, so retry rules that treat timeouts
 * as transient treat this one so too.
 */
export class DownloadStalledError extends Error {
  override readonly name = 'TimeoutError'
  /** Bytes of the file on disk when it stalled. */
  readonly bytes: number
  readonly idleMs: number

  constructor(name: string, idleMs: number, bytes: number, options?: ErrorOptions) {
    super(`${name}: no data for ${idleMs} ms after ${bytes} bytes`, options)
    this.idleMs = idleMs
    this.bytes = bytes
  }
}
