import { getEventListeners } from 'node:events'
import t from 'tap'
import { lifetimeController, scopedSignal } from '../../src/adapters/scoped-signal.ts'

/**
 * `scopedSignal` follows its sources until released, and leaves nothing on them afterwards (issue
 * 13 point 7: `AbortSignal.any` with the server's close signal kept an entry per request on it).
 */
t.test('fires with the first source that aborts, with its reason', async (t) => {
  const request = new AbortController()
  const server = new AbortController()
  const scoped = scopedSignal(request.signal, server.signal)
  t.notOk(scoped.signal.aborted)
  server.abort(new Error('closing'))
  t.ok(scoped.signal.aborted)
  t.equal((scoped.signal.reason as Error).message, 'closing')
  t.equal(getEventListeners(request.signal, 'abort').length, 0, 'and lets go of the other source')
})

t.test('a source that already fired gives an aborted signal', async (t) => {
  const reason = new Error('gone')
  const scoped = scopedSignal(new AbortController().signal, AbortSignal.abort(reason))
  t.ok(scoped.signal.aborted)
  t.equal(scoped.signal.reason, reason)
  scoped.release()
})

t.test('release leaves no listener on the sources, and the signal no longer follows them', async (t) => {
  const server = new AbortController()
  for (let i = 0; i < 1000; i++) {
    const request = new AbortController()
    const scoped = scopedSignal(request.signal, server.signal)
    scoped.release()
    scoped.release()
    t.equal(getEventListeners(request.signal, 'abort').length, 0)
  }
  t.equal(
    getEventListeners(server.signal, 'abort').length,
    0,
    'nothing of 1,000 requests stays on the long-lived signal',
  )
  const kept = scopedSignal(server.signal)
  kept.release()
  server.abort()
  t.notOk(kept.signal.aborted, 'a released signal does not fire')
})

t.test('many requests in flight on a lifetime signal raise no MaxListenersExceededWarning', async (t) => {
  const warnings: string[] = []
  const onWarning = (warning: Error) => warnings.push(warning.name)
  process.on('warning', onWarning)
  t.teardown(() => process.off('warning', onWarning))
  const server = lifetimeController()
  const inFlight = Array.from({ length: 50 }, () => scopedSignal(new AbortController().signal, server.signal))
  await new Promise((resolve) => setImmediate(resolve))
  t.same(warnings, [])
  server.abort()
  t.ok(
    inFlight.every((s) => s.signal.aborted),
    'and closing still reaches every one',
  )
})
