import t from 'tap'
import { fetchErrorText, untilAborted } from '@loom/core'

t.test('untilAborted: the value, the error, or the reason of an early abort', async (t) => {
  const never = new AbortController().signal
  t.equal(await untilAborted(Promise.resolve(7), never), 7)
  const boom = new Error('boom')
  await t.rejects(untilAborted(Promise.reject(boom), never), boom)

  const reason = new Error('request cancelled')
  await t.rejects(untilAborted(new Promise(() => undefined), AbortSignal.abort(reason)), reason)

  let finish: (value: string) => void = () => undefined
  const shared = new Promise<string>((resolve) => (finish = resolve))
  const leaving = new AbortController()
  const first = untilAborted(shared, leaving.signal)
  const second = untilAborted(shared, never)
  leaving.abort(reason)
  await t.rejects(first, reason, 'one caller leaves')
  finish('done')
  t.equal(await second, 'done', 'the shared work goes on for the others')
})

t.test('fetchErrorText names the socket error under a fetch failure', async (t) => {
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })
  t.equal(fetchErrorText(new TypeError('fetch failed', { cause: refused })), 'fetch failed (ECONNREFUSED)')
  t.equal(
    fetchErrorText(new TypeError('terminated', { cause: new Error('other side closed') })),
    'terminated (other side closed)',
  )
  t.equal(fetchErrorText(new Error('plain')), 'plain')
  t.equal(fetchErrorText('text'), 'text')
})
