import { join } from 'node:path'
import pino from 'pino'
import t from 'tap'
import { AdapterCache } from '../../src/adapters/adapter-cache.ts'
import { AdapterManager } from '../../src/adapters/adapter-manager.ts'
import { AuthGate } from '../../src/adapters/auth-gate.ts'
import type { AdapterSource } from '../../src/contracts/adapter-source.ts'
import type { Backend } from '../../src/contracts/backend.ts'

/**
 * Issue 13 point 7: a finished request leaves nothing on the manager's close signal. The signal a
 * source was given for a request that is over no longer follows the server's shutdown; with
 * `AbortSignal.any([request, closing])` every request's signal stayed tied to it (Node 20 keeps an
 * entry per call on the long-lived signal: a leak per adapter request).
 */
const logger = pino({ level: 'silent' })

t.test('signals of finished acquisitions are released from the close signal', async (t) => {
  const dir = t.testdir({ 'adapter_config.json': '{}' })
  const given: AbortSignal[] = []
  const source: AdapterSource = {
    name: 'dirs',
    async resolve(ref, ctx) {
      given.push(ctx.signal)
      if (ref.id === 'missing') throw new Error('no such adapter')
      return { ...ref, revision: 'r1', files: [{ path: 'adapter_config.json' }], localDir: dir }
    },
    fetch: async () => undefined,
  }
  const backend = {
    loadAdapter: async () => ({ key: 'dirs:a@r1', id: 'a', kind: 'lora', size: 8 }),
  } as unknown as Backend
  const adapters = new AdapterManager({
    sources: new Map([['dirs', source]]),
    auth: new AuthGate({ checkers: new Map(), ttlSeconds: 0 }),
    backend,
    cache: new AdapterCache({ root: join(dir, 'cache'), attempts: 1, logger }),
    logger,
    resolveTtlSeconds: 0,
  })
  for (let i = 0; i < 50; i++) {
    const request = new AbortController()
    const { handle } = await adapters.acquire({ source: 'dirs', id: 'a' }, undefined, request.signal)
    t.equal(handle.key, 'dirs:a@r1')
    await t.rejects(adapters.acquire({ source: 'dirs', id: 'missing' }, undefined, request.signal))
  }
  t.equal(given.length, 100)
  adapters.close()
  t.equal(given.filter((signal) => signal.aborted).length, 0, 'closing reaches none of the finished requests')
})
