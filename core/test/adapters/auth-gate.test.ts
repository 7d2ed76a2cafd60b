import t from 'tap'
import type { AuthChecker, AuthDecision } from '../../src/contracts/auth-checker.ts'
import { AuthGate, MAX_ALLOWED_DECISIONS } from '../../src/adapters/auth-gate.ts'

/** A checker whose decisions the test controls, counting how often the source is asked. */
function checker(decide: (token: string | undefined) => AuthDecision | Promise<AuthDecision>) {
  const calls: (string | undefined)[] = []
  const impl: AuthChecker = {
    source: 'hub',
    async check(_ref, token) {
      calls.push(token)
      return decide(token)
    },
  }
  return { impl, calls }
}

const ref = { source: 'hub', id: 'acme/poet' }

t.test('every request is checked when no TTL is set, and refusals carry their reason', async (t) => {
  let allowed = true
  const { impl, calls } = checker(() =>
    allowed ? { allowed: true } : { allowed: false, reason: 'invalid', message: 'token revoked' },
  )
  const gate = new AuthGate({ checkers: new Map([['hub', impl]]), ttlSeconds: 0 })
  await gate.authorize(ref, 'tok')
  await gate.authorize(ref, 'tok')
  t.equal(calls.length, 2, 'two requests, two checks')
  allowed = false
  await t.rejects(gate.authorize(ref, 'tok'), {
    code: 'auth_invalid',
    message: 'The token was refused for adapter `acme/poet`: token revoked',
  })
})

t.test('identical concurrent checks share one call; different tokens do not', async (t) => {
  let release!: () => void
  const gate0 = new Promise<void>((resolve) => (release = resolve))
  const { impl, calls } = checker(async () => {
    await gate0
    return { allowed: true }
  })
  const gate = new AuthGate({ checkers: new Map([['hub', impl]]), ttlSeconds: 0 })
  const pending = [gate.authorize(ref, 'a'), gate.authorize(ref, 'a'), gate.authorize(ref, 'b')]
  release()
  await Promise.all(pending)
  t.same(calls, ['a', 'b'])
})

t.test('a TTL reuses only allowed decisions, per token', async (t) => {
  let decision: AuthDecision = { allowed: true }
  const { impl, calls } = checker(() => decision)
  const gate = new AuthGate({ checkers: new Map([['hub', impl]]), ttlSeconds: 60 })
  await gate.authorize(ref, 'a')
  await gate.authorize(ref, 'a')
  t.equal(calls.length, 1, 'the allowed decision is reused within the TTL')
  await gate.authorize(ref, 'b')
  t.equal(calls.length, 2, 'another token is checked on its own')
  decision = { allowed: false, reason: 'missing', message: 'the repository is private' }
  await t.rejects(gate.authorize(ref, undefined), { code: 'auth_missing', message: /requires a token/ })
  await t.rejects(gate.authorize(ref, undefined), { code: 'auth_missing' })
  t.equal(calls.length, 4, 'refusals are never reused')
})

t.test('sources without a checker are open; a failing checker is auth_unavailable, never allowed', async (t) => {
  const gate = new AuthGate({ checkers: new Map(), ttlSeconds: 0 })
  await gate.authorize({ source: 'local', id: 'x' }, undefined)
  const broken = new AuthGate({
    checkers: new Map([['hub', checker(() => Promise.reject(new Error('hub unreachable'))).impl]]),
    ttlSeconds: 0,
  })
  await t.rejects(broken.authorize(ref, 'a'), {
    code: 'auth_unavailable',
    message: 'Authorization for adapter `acme/poet` could not be checked: hub unreachable',
  })
})

t.test('a header token reaches the source only when the adapter needs one', async (t) => {
  // Public: anonymous access is allowed, so an SDK api key in the header is never sent.
  const pub = checker((token) =>
    token === undefined ? { allowed: true } : { allowed: false, reason: 'invalid', message: 'unknown token' },
  )
  const gate = new AuthGate({ checkers: new Map([['hub', pub.impl]]), ttlSeconds: 0 })
  t.equal(await gate.authorize(ref, 'sk-gateway-key', { fromHeader: true }), undefined, 'fetch without a token')
  t.same(pub.calls, [undefined], 'the key was never sent')
  // The same key in the body is the caller's adapter token: checked as sent, and refused.
  await t.rejects(gate.authorize(ref, 'sk-gateway-key'), { code: 'auth_invalid' })

  // Private: anonymous is refused, so the header token is tried and used for the fetch.
  const priv = checker((token) =>
    token === 'hf_ok' ? { allowed: true } : { allowed: false, reason: token ? 'invalid' : 'missing', message: 'no' },
  )
  const gate2 = new AuthGate({ checkers: new Map([['hub', priv.impl]]), ttlSeconds: 0 })
  t.equal(await gate2.authorize(ref, 'hf_ok', { fromHeader: true }), 'hf_ok')
  t.same(priv.calls, [undefined, 'hf_ok'])
  await t.rejects(gate2.authorize(ref, 'sk-other', { fromHeader: true }), { code: 'auth_invalid' })
})

t.test('closing the gate stops checks in flight with server_closing', async (t) => {
  const { impl } = checker(
    () => new Promise<AuthDecision>(() => undefined), // a source that never answers
  )
  const slow: AuthChecker = {
    source: 'hub',
    check: (ref, token, signal) =>
      new Promise((resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true })
        void impl.check(ref, token, signal).then(resolve)
      }),
  }
  const gate = new AuthGate({ checkers: new Map([['hub', slow]]), ttlSeconds: 0 })
  const pending = gate.authorize(ref, 'tok')
  gate.close()
  await t.rejects(pending, { code: 'server_closing' })
  await t.rejects(gate.authorize(ref, 'tok'), { code: 'server_closing' }, 'and new checks after it')
})

t.test('kept decisions are bounded: expired ones go, and the oldest beyond MAX_ALLOWED_DECISIONS', async (t) => {
  const { impl, calls } = checker(() => ({ allowed: true }))
  const gate = new AuthGate({ checkers: new Map([['hub', impl]]), ttlSeconds: 60 })
  const n = MAX_ALLOWED_DECISIONS + 50
  for (let i = 0; i < n; i++) await gate.authorize(ref, `caller-${i}`)
  t.equal(gate.cachedDecisions, MAX_ALLOWED_DECISIONS, `${n} callers' tokens, ${MAX_ALLOWED_DECISIONS} kept`)
  await gate.authorize(ref, `caller-${n - 1}`)
  t.equal(calls.length, n, 'the newest is still reused')
  await gate.authorize(ref, 'caller-0')
  t.equal(calls.length, n + 1, 'the oldest was dropped: checked again')

  const realNow = Date.now
  t.teardown(() => (Date.now = realNow))
  const now = realNow()
  Date.now = () => now + 61_000
  await gate.authorize(ref, 'late')
  t.equal(gate.cachedDecisions, 1, 'once the TTL has passed, expired decisions go as a new one comes')
})

t.test('a finished check leaves nothing on the gate: closing does not reach its signal', async (t) => {
  const given: AbortSignal[] = []
  const impl: AuthChecker = {
    source: 'hub',
    async check(_ref, _token, signal) {
      given.push(signal)
      return { allowed: true }
    },
  }
  const gate = new AuthGate({ checkers: new Map([['hub', impl]]), ttlSeconds: 0 })
  for (let i = 0; i < 20; i++) await gate.authorize(ref, 'tok')
  gate.close()
  t.equal(given.length, 20)
  t.equal(given.filter((s) => s.aborted).length, 0)
})
