import t from 'tap'
import pino from 'pino'
import { AdapterCache } from '../../src/adapters/adapter-cache.ts'
import { AdapterManager } from '../../src/adapters/adapter-manager.ts'
import { AuthGate } from '../../src/adapters/auth-gate.ts'
import type { AdapterSource } from '../../src/contracts/adapter-source.ts'
import type { Backend } from '../../src/contracts/backend.ts'

/**
 * A source that throws whatever it throws once the request's signal fired (`throwIfAborted`
 * rethrows a plain Error) is reported as `request_cancelled`, and once the server closes as
 * `server_closing`: neither is an internal error.
 */
const logger = pino({ level: 'silent' })

function manager(root: string): AdapterManager {
  const slow: AdapterSource = {
    name: 'slow',
    resolve: (_ref, ctx) =>
      new Promise((_resolve, reject) => {
        ctx.signal.addEventListener('abort', () => reject(new Error('client disconnected')), { once: true })
      }),
    fetch: async () => undefined,
  }
  return new AdapterManager({
    sources: new Map([['slow', slow]]),
    auth: new AuthGate({ checkers: new Map(), ttlSeconds: 0 }),
    backend: {} as Backend,
    cache: new AdapterCache({ root, attempts: 1, logger }),
    logger,
    resolveTtlSeconds: 0,
  })
}

t.test('a request cancelled while its source resolves is request_cancelled', async (t) => {
  const adapters = manager(t.testdir())
  const request = new AbortController()
  const pending = adapters.acquire({ source: 'slow', id: 'x' }, undefined, request.signal)
  request.abort(new Error('client disconnected'))
  await t.rejects(pending, { code: 'request_cancelled' })
})

t.test('closing the manager turns a pending resolve into server_closing', async (t) => {
  const adapters = manager(t.testdir())
  const pending = adapters.acquire({ source: 'slow', id: 'x' }, undefined, new AbortController().signal)
  adapters.close()
  await t.rejects(pending, { code: 'server_closing' })
})
