import t from 'tap'
import { FakeHub } from '@loom/testkit'
import { READER, STRANGER, registerHub, startHub } from './hub-harness.ts'

const signal = () => new AbortController().signal

t.test('decisions for public, private, gated and missing repos', async (t) => {
  const hub = await startHub(t)
  const { checker } = await registerHub({ hub_url: hub.url })
  t.equal(checker.source, 'hub')
  const check = (id: string, token?: string) => checker.check({ source: 'hub', id }, token, signal())

  t.same(await check('acme/poet'), { allowed: true }, 'public, no token')
  t.same(await check('acme/poet', STRANGER), { allowed: true }, 'public, any valid token')
  t.same(await check('acme/poet', 'hf_unknown'), {
    allowed: false,
    reason: 'invalid',
    message: 'the hub does not accept the token (unknown, expired or revoked)',
  })

  t.same(await check('acme/secret', READER), { allowed: true })
  t.same(await check('acme/secret'), {
    allowed: false,
    reason: 'missing',
    message:
      'the hub has no public repository `acme/secret`: it is private, gated or missing; send a token that can read it',
  })
  t.same(await check('acme/secret', STRANGER), {
    allowed: false,
    reason: 'forbidden',
    message:
      'the hub has no repository `acme/secret` that the token can read (it is missing, or private and not shared with it)',
  })
  t.match(await check('acme/nothing', READER), { allowed: false, reason: 'forbidden' }, 'a miss looks like no access')
  t.match(await check('acme/nothing'), { allowed: false, reason: 'missing' })
  t.same(await check('acme/secret@v9', READER), { allowed: true }, 'a missing revision is for resolve to report')
  t.same(await check('not an id'), { allowed: true }, 'a malformed id is for resolve to report')

  t.same(await check('acme/gated', READER), { allowed: true })
  t.match(await check('acme/gated'), { allowed: false, reason: 'missing' })
  t.same(await check('acme/gated', STRANGER), {
    allowed: false,
    reason: 'forbidden',
    message: '`acme/gated` is gated and the token has not been granted access',
  })
})

t.test('asks the hub on every call: a revoked token is refused at once', async (t) => {
  const hub = await startHub(t)
  const { checker } = await registerHub({ hub_url: hub.url })
  const check = () => checker.check({ source: 'hub', id: 'acme/secret' }, READER, signal())
  t.same(await check(), { allowed: true })
  t.same(await check(), { allowed: true })
  t.equal(hub.requests.length, 2, 'one request per check for a non-gated repo, nothing cached')
  t.same(
    hub.requests.map((r) => [r.method, r.path, r.token]),
    [
      ['GET', '/api/models/acme/secret/revision/HEAD', READER],
      ['GET', '/api/models/acme/secret/revision/HEAD', READER],
    ],
  )
  hub.revokeToken(READER)
  t.match(await check(), { allowed: false, reason: 'invalid' })
  hub.addToken(READER, { canRead: [] })
  t.match(await check(), { allowed: false, reason: 'forbidden' }, 'access withdrawn')
  hub.setVisibility('acme/secret', { private: false })
  t.same(await check(), { allowed: true }, 'made public')
})

t.test('throws only when the hub cannot answer; retries transient failures first', async (t) => {
  const hub = await startHub(t)
  const { checker, logs } = await registerHub({ hub_url: hub.url, retries: 1 })
  hub.failNext(1)
  t.same(await checker.check({ source: 'hub', id: 'acme/secret' }, READER, signal()), { allowed: true })
  t.match(logs.join('\n'), /retrying authorization check/)
  hub.failNext(2, { status: 502 })
  await t.rejects(checker.check({ source: 'hub', id: 'acme/secret' }, READER, signal()), {
    message: 'model info of acme/secret@HEAD: the hub answered HTTP 502',
  })
  t.notMatch(logs.join('\n'), READER, 'no token in the logs')

  const gone = await FakeHub.start()
  const url = gone.url
  await gone.close()
  const offline = await registerHub({ hub_url: url, retries: 0 })
  await t.rejects(offline.checker.check({ source: 'hub', id: 'acme/secret' }, READER, signal()), {
    message: /fetch failed \(ECONNREFUSED\)/,
  })

  const cancel = new AbortController()
  hub.setDelay(200)
  const pending = checker.check({ source: 'hub', id: 'acme/poet' }, undefined, cancel.signal)
  cancel.abort(new Error('request cancelled'))
  await t.rejects(pending, { message: 'request cancelled' })
})

t.test('global token fallback: used when the request has none, and named in messages', async (t) => {
  const hub = await startHub(t)
  const { checker } = await registerHub({ hub_url: hub.url }, { LORAX_USE_GLOBAL_HF_TOKEN: '1', HF_TOKEN: READER })
  t.same(await checker.check({ source: 'hub', id: 'acme/secret' }, undefined, signal()), { allowed: true })
  t.equal(hub.requests.at(-1)!.token, READER)
  t.match(await checker.check({ source: 'hub', id: 'acme/secret' }, STRANGER, signal()), {
    allowed: false,
    reason: 'forbidden',
  })
  hub.revokeToken(READER)
  t.same(await checker.check({ source: 'hub', id: 'acme/secret' }, undefined, signal()), {
    allowed: false,
    reason: 'invalid',
    message: "the hub does not accept the server's token (global fallback) (unknown, expired or revoked)",
  })
})
