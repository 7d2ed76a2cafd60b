import { connect, type AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { startTestServer } from './app-fixture.ts'

/**
 * A test server listening on a free loopback port, with a streaming route in each family
 * (`/generate_stream`, `/v1/completions`) that sends `{"token":"a"}`, waits `gapMs`, then sends
 * `{"token":"b"}`. Closed at the end of `t`.
 */
export async function listenWithStreams(t: Test, gapMs = 0): Promise<number> {
  const { app } = await startTestServer()
  await app.register(async (scope) => {
    for (const url of ['/generate_stream', '/v1/completions']) {
      scope.post(url, { sse: 'manual' }, async (_request, reply) => {
        await reply.sse.send({ data: { token: 'a' } })
        if (gapMs > 0) await sleep(gapMs)
        await reply.sse.send({ data: { token: 'b' } })
      })
    }
  })
  t.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

/** Write `text` on a fresh connection; resolves with everything read until the server closes it. */
export function exchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text))
    let answer = ''
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => (answer += chunk))
    socket.on('close', () => resolve(answer))
    socket.on('error', reject)
  })
}
