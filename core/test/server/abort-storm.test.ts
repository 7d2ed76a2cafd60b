import { request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { loadConfig } from '../../src/config/index.ts'
import { LoomServer } from '../../src/server/loom-server.ts'

/**
 * Issue 13, point 1: clients that leave at random moments, on every generation route, streaming
 * and not, with `n` 1 and 16, never reach an unhandled rejection (which takes the process down),
 * never trip the max-listeners warning, and each request is counted exactly once: cancelled when
 * its client left before the end, succeeded when it read the whole answer.
 */

interface Shot {
  readonly path: string
  readonly body: object
  /** Milliseconds after sending when the client hangs up; null to read the whole answer. */
  readonly abortAfterMs: number | null
}

/** A tiny deterministic PRNG, so a failing run can be replayed from its seed. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = Math.imul(a ^ (a >>> 15), 1 | a)
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

function shots(seed: number, count: number): Shot[] {
  const random = mulberry32(seed)
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!
  const out: Shot[] = []
  for (let i = 0; i < count; i++) {
    // One request in eight runs to the end (short), the rest are long and abandoned.
    const completes = random() < 0.125
    const tokens = completes ? 4 : 480
    const n = pick([1, 16])
    const stream = random() < 0.8
    const route = pick(['chat', 'completions', 'completions', 'chat', 'native'])
    // Greedy rows speculate with the Medusa heads (several tokens a step); sampled rows do not.
    const temperature = pick([0, 1])
    const sampling = { max_tokens: tokens, ignore_eos_token: true, stream, temperature, seed: i }
    const body =
      route === 'chat'
        ? { model: '', messages: [{ role: 'user', content: 'hi' }], n, ...sampling }
        : route === 'completions'
          ? { model: '', prompt: 'hi', n, ...sampling }
          : {
              inputs: 'hi',
              parameters: { max_new_tokens: tokens, ignore_eos_token: true, seed: i, do_sample: temperature > 0 },
            }
    const path =
      route === 'chat'
        ? '/v1/chat/completions'
        : route === 'completions'
          ? '/v1/completions'
          : stream
            ? '/generate_stream'
            : '/generate'
    // Hang-ups spread from "before the headers are read" to "well into the stream".
    out.push({ path, body, abortAfterMs: completes ? null : Math.floor(random() * random() * 80) })
  }
  return out
}

/** Send one shot; resolves with whether the client read the whole answer. */
function fire(port: number, shot: Shot, id: string): Promise<{ complete: boolean; status: number | null }> {
  return new Promise((resolve) => {
    let status: number | null = null
    let settled = false
    const done = (complete: boolean) => {
      if (settled) return
      settled = true
      resolve({ complete, status })
    }
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: shot.path,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': id },
      },
      (res) => {
        status = res.statusCode ?? null
        res.on('data', () => undefined)
        res.on('end', () => done(true))
        res.on('error', () => done(false))
        res.on('aborted', () => done(false))
      },
    )
    req.on('error', () => done(false))
    req.on('close', () => done(false))
    if (shot.abortAfterMs !== null) {
      setTimeout(() => {
        if (!settled) {
          req.destroy()
          done(false)
        }
      }, shot.abortAfterMs)
    }
    req.end(JSON.stringify(shot.body))
  })
}

function counter(text: string, name: string): number {
  const match = new RegExp(`^${name} (\\d+)$`, 'm').exec(text)
  return match ? Number(match[1]) : 0
}

t.test('hundreds of clients leaving at random moments neither crash the server nor miscount', async (t) => {
  const unhandled: unknown[] = []
  const warnings: string[] = []
  const onUnhandled = (reason: unknown) => unhandled.push(reason)
  const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`)
  process.on('unhandledRejection', onUnhandled)
  process.on('warning', onWarning)
  t.teardown(() => {
    process.off('unhandledRejection', onUnhandled)
    process.off('warning', onWarning)
  })

  // The server `npm start` runs (demo model, Medusa speculation), as the load hit it.
  const config = await loadConfig(fileURLToPath(new URL('../../../config/default.yaml', import.meta.url)))
  // The request ids the server logged as arriving: a client that hangs up at once may leave
  // before its request is read, and that request does not exist for the server.
  const arrived = new Set<string>()
  const logDestination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const id of chunk.toString().matchAll(/"reqId":"(storm-\d+)","req":/g)) arrived.add(id[1]!)
      done()
    },
  })
  const server = await LoomServer.create(config, { logDestination })
  t.teardown(() => server.close())
  await server.listen({ host: '127.0.0.1', port: 0 })
  await server.start()
  const { port } = server.app.server.address() as AddressInfo

  const seed = Number(process.env.ABORT_STORM_SEED ?? 13)
  const plan = shots(seed, Number(process.env.ABORT_STORM_COUNT ?? 320))
  const outcomes: { complete: boolean; status: number | null }[] = []
  // A few clients at a time, so hang-ups land while other requests share the batch.
  const concurrency = Number(process.env.ABORT_STORM_CONCURRENCY ?? 8)
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < plan.length) {
        const i = next++
        outcomes[i] = await fire(port, plan[i]!, `storm-${i}`)
      }
    }),
  )

  // The server is alive and still answers a whole request.
  const alive = await server.app.inject({
    method: 'POST',
    url: '/v1/completions',
    payload: { model: '', prompt: 'hi', max_tokens: 3 },
  })
  t.equal(alive.statusCode, 200, 'the server still serves after the storm')

  const completed = outcomes.filter((o) => o.complete).length
  const abandoned = plan.length - completed
  const abandonedOnServer = outcomes.filter((o, i) => !o.complete && arrived.has(`storm-${i}`)).length
  t.ok(abandoned > plan.length / 2, `most requests were abandoned (${abandoned} of ${plan.length})`)
  t.ok(
    outcomes.every((o) => !o.complete || o.status === 200),
    'every answer read to the end was a success',
  )

  // Cancellations are counted as the engine notices them: wait for the books to balance.
  let metrics = ''
  const deadline = Date.now() + 10_000
  for (;;) {
    metrics = (await server.app.inject({ method: 'GET', url: '/metrics' })).body
    const settled =
      counter(metrics, 'loom_request_success') + counter(metrics, 'loom_request_cancelled') >=
      counter(metrics, 'loom_request_count')
    if (settled || Date.now() > deadline) break
    await sleep(50)
  }
  t.equal(counter(metrics, 'loom_request_count'), arrived.size + 1, 'every request that arrived was counted')
  t.equal(counter(metrics, 'loom_request_success'), completed + 1, 'each request read to the end is one success')
  t.equal(
    counter(metrics, 'loom_request_cancelled'),
    abandonedOnServer,
    'each abandoned request that arrived is one cancellation',
  )
  t.notMatch(metrics, /^loom_request_failure\{/m, 'no request counted as a failure')
  t.same(unhandled.map(String), [], 'no unhandled rejection')
  t.same(
    warnings.filter((w) => /MaxListeners/.test(w)),
    [],
    'no max-listeners warning',
  )
  t.equal(server.backend.stats().runningRequests, 0, 'no request left running')
})
