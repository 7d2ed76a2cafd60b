import t from 'tap'
import { backoffMs, withRetry } from '@loom/core'

class Transient extends Error {}

t.test('retries retryable failures with growing waits, then succeeds', async (t) => {
  const seen: [number, number][] = []
  let calls = 0
  const value = await withRetry(
    async (attempt) => {
      calls++
      if (attempt < 3) throw new Transient(`try ${attempt}`)
      return 'ok'
    },
    {
      attempts: 3,
      baseMs: 4,
      jitter: 0,
      isRetryable: (err) => err instanceof Transient,
      onRetry: (_err, attempt, waitMs) => void seen.push([attempt, waitMs]),
    },
  )
  t.equal(value, 'ok')
  t.equal(calls, 3)
  t.same(seen, [
    [1, 4],
    [2, 8],
  ])
})

t.test('a refused error or the last try throws the error itself', async (t) => {
  let calls = 0
  const final = new Error('bad request')
  await t.rejects(
    withRetry(
      async () => {
        calls++
        throw final
      },
      { attempts: 5, baseMs: 1, isRetryable: (err) => err instanceof Transient },
    ),
    final,
  )
  t.equal(calls, 1, 'not retried')

  calls = 0
  await t.rejects(
    withRetry(
      async (attempt) => {
        calls++
        throw new Transient(`try ${attempt}`)
      },
      { attempts: 3, baseMs: 1 },
    ),
    { message: 'try 3' },
    'every error is retryable by default',
  )
  t.equal(calls, 3)
  await t.rejects(
    withRetry(() => Promise.reject(new Transient('once')), { attempts: 1, baseMs: 1 }),
    { message: 'once' },
    'attempts: 1 never retries',
  )
})

t.test('an abort ends the wait at once with the reason, and stops further tries', async (t) => {
  const controller = new AbortController()
  const reason = new Error('request cancelled')
  let calls = 0
  const started = Date.now()
  const run = withRetry(
    async () => {
      calls++
      throw new Transient('no answer')
    },
    { attempts: 5, baseMs: 60_000, signal: controller.signal },
  )
  setTimeout(() => controller.abort(reason), 20)
  await t.rejects(run, reason)
  t.equal(calls, 1)
  t.ok(Date.now() - started < 5_000, 'the minute-long wait was cut short')

  calls = 0
  const aborted = AbortSignal.abort(reason)
  const own = new Transient('failed while aborted')
  await t.rejects(
    withRetry(
      async () => {
        calls++
        throw own
      },
      { attempts: 5, baseMs: 1, signal: aborted },
    ),
    own,
    'a try that fails after the abort throws its own error',
  )
  t.equal(calls, 1)
})

t.test('backoff: doubling, jitter bounds, cap', async (t) => {
  const policy = { attempts: 10, baseMs: 100 }
  t.equal(backoffMs(policy, 1, 0.5), 100)
  t.equal(backoffMs(policy, 3, 0.5), 400)
  t.equal(backoffMs(policy, 1, 0), 75, '-25% by default')
  t.equal(backoffMs(policy, 1, 1), 125, '+25% by default')
  t.equal(backoffMs({ ...policy, jitter: 0.2 }, 2, 1), 240)
  t.equal(backoffMs(policy, 20, 0.5), 10_000, 'at most 10 s by default')
  t.equal(backoffMs({ ...policy, maxMs: 5_000 }, 7, 1), 5_000)
  t.equal(backoffMs({ attempts: 3, baseMs: 0 }, 3), 0)
})
