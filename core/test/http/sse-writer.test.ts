import { EventEmitter } from 'node:events'
import type { FastifyReply } from 'fastify'
import t from 'tap'
import { SseWriter } from '../../src/http/sse-writer.ts'

/** A reply whose socket is full: @fastify/sse's send waits for a `drain` that never comes. */
function stalledReply() {
  const raw = Object.assign(new EventEmitter(), { destroyed: false, writableEnded: false })
  const sse = {
    isConnected: true,
    sends: 0,
    send(): Promise<void> {
      this.sends++
      return new Promise(() => undefined)
    },
  }
  raw.once('close', () => {
    sse.isConnected = false
  })
  return { reply: { raw, sse } as unknown as FastifyReply, raw, sse }
}

t.test('a send blocked on a full socket settles false when the client closes it', async (t) => {
  const { reply, raw } = stalledReply()
  const out = new SseWriter(reply)
  const sending = out.send({ data: { token: 1 } })
  setTimeout(() => raw.emit('close'), 10)
  t.equal(await sending, false, 'the client has gone')
  t.equal(out.open, false)
  t.equal(await out.send('[DONE]'), false, 'later sends answer at once')
})

t.test('a send on a closed connection is false, not an exception', async (t) => {
  const { reply, sse } = stalledReply()
  sse.isConnected = false
  const out = new SseWriter(reply)
  t.equal(await out.send('[DONE]'), false)
  t.equal(sse.sends, 0, 'nothing was written')
})

t.test("a write error while the client is still there is the server's to report", async (t) => {
  const raw = Object.assign(new EventEmitter(), { destroyed: false, writableEnded: false })
  const reply = {
    raw,
    sse: { isConnected: true, send: () => Promise.reject(new TypeError('Invalid SSE source type')) },
  } as unknown as FastifyReply
  await t.rejects(new SseWriter(reply).send({ data: 1 }), TypeError)
})

t.test('a reply that is already closed is not open', async (t) => {
  const raw = Object.assign(new EventEmitter(), { destroyed: true, writableEnded: false })
  const out = new SseWriter({ raw, sse: { isConnected: true } } as unknown as FastifyReply)
  t.equal(out.open, false)
  t.equal(await out.send('x'), false)
})
