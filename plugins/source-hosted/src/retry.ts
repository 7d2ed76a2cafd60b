import { setTimeout as sleep } from 'node:timers/promises'

export interface RetryPolicy {
  /** Total tries, at least 1. */
  readonly attempts: number
  /** First wait in milliseconds; doubled per try, with ±25% jitter, at most 10 s. */
  readonly baseMs: number
}

/**
 * Run `op` until it succeeds, fails with a non-transient error, or runs out of attempts. Waits are
 * cut short by `signal`, and an aborted signal stops the retries at once.
 */
export async function withRetries<T>(
  policy: RetryPolicy,
  signal: AbortSignal,
  isTransient: (err: unknown) => boolean,
  op: (attempt: number) => Promise<T>,
  onRetry?: (err: unknown, attempt: number, waitMs: number) => void,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await op(attempt)
    } catch (err) {
      if (signal.aborted || attempt >= policy.attempts || !isTransient(err)) throw err
      const waitMs = Math.min(10_000, Math.round(policy.baseMs * 2 ** (attempt - 1) * (0.75 + Math.random() / 2)))
      onRetry?.(err, attempt, waitMs)
      await sleep(waitMs, undefined, { signal })
    }
  }
}
