import { setTimeout as sleep } from 'node:timers/promises'
import { HubRequestError } from './hub-request-error.ts'

export interface RetryPolicy {
  /** Tries after the first one. */
  readonly retries: number
  /** The first wait; each later one doubles (with ±20% jitter), capped at 5 s. */
  readonly baseDelayMs: number
}

/**
 * Run `attempt` until it succeeds, fails for good, or `policy.retries` retries are spent. Only
 * transient `HubRequestError`s are retried; the wait between tries stops at once when `signal`
 * aborts (the abort reason is thrown).
 */
export async function withRetries<T>(
  policy: RetryPolicy,
  signal: AbortSignal,
  attempt: () => Promise<T>,
  onRetry: (err: HubRequestError, retry: number, delayMs: number) => void,
): Promise<T> {
  for (let retry = 0; ; retry++) {
    try {
      return await attempt()
    } catch (err) {
      if (!(err instanceof HubRequestError) || !err.transient || retry >= policy.retries || signal.aborted) throw err
      const delayMs = Math.round(Math.min(5_000, policy.baseDelayMs * 2 ** retry) * (0.8 + Math.random() * 0.4))
      onRetry(err, retry + 1, delayMs)
      await sleep(delayMs, undefined, { signal }).catch(() => {
        throw signal.reason
      })
    }
  }
}
