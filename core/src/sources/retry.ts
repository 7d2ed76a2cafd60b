import { setTimeout as sleep } from 'node:timers/promises'

/** How often and how patiently to try: what a plugin keeps from its options. */
export interface RetryPolicy {
  /** Total tries, at least 1 (1: no retry). */
  readonly attempts: number
  /** The first wait in milliseconds; doubled per try. */
  readonly baseMs: number
  /** The longest wait, jitter included; default 10 s. */
  readonly maxMs?: number
  /** Each wait is moved by up to this fraction either way (0.25: ±25%), so callers that failed together do not retry together; default 0.25. */
  readonly jitter?: number
}

/** One call's retry settings: the policy plus what the caller knows about its errors and its signal. */
export interface RetryOptions extends RetryPolicy {
  /** Stops the retries: no further try starts, and a wait ends at once with `signal.reason`. */
  readonly signal?: AbortSignal
  /** Whether a failure may go away on its own; others are thrown at once. Default: every error. */
  readonly isRetryable?: (err: unknown) => boolean
  /** Told before each wait (for a log line): the error, the try that failed (1-based) and the wait. */
  readonly onRetry?: (err: unknown, attempt: number, waitMs: number) => void
}

/** The wait after try `attempt` (1-based): `baseMs · 2^(attempt-1)`, jittered, at most `maxMs`. */
export function backoffMs(policy: RetryPolicy, attempt: number, random: number = Math.random()): number {
  const jitter = policy.jitter ?? 0.25
  const wait = policy.baseMs * 2 ** (attempt - 1) * (1 - jitter + 2 * jitter * random)
  return Math.min(policy.maxMs ?? 10_000, Math.round(wait))
}

/**
 * Run `fn` until it succeeds, fails with an error `isRetryable` refuses, or `attempts` tries are
 * spent; the last error is thrown as it is. Between tries it waits with exponential backoff and
 * jitter. An aborted `signal` ends it: a try that fails after the abort throws its own error, and a
 * wait in progress throws `signal.reason` (so a cancelled request surfaces as the cancellation).
 *
 * ```ts
 * const body = await withRetry((attempt) => download(url, signal), {
 *   attempts: 3, baseMs: 250, signal, isRetryable: isTransient,
 *   onRetry: (err, attempt, waitMs) => logger.warn({ attempt, waitMs }, 'download failed; retrying'),
 * })
 * ```
 */
export async function withRetry<T>(fn: (attempt: number) => Promise<T>, options: RetryOptions): Promise<T> {
  const { signal, isRetryable = () => true } = options
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt)
    } catch (err) {
      if (signal?.aborted || attempt >= options.attempts || !isRetryable(err)) throw err
      const waitMs = backoffMs(options, attempt)
      options.onRetry?.(err, attempt, waitMs)
      await sleep(waitMs, undefined, signal === undefined ? undefined : { signal }).catch(() => {
        throw signal?.reason
      })
    }
  }
}
