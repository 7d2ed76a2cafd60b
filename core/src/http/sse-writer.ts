import type {} from '@fastify/sse'
import type { FastifyReply } from 'fastify'

/** One server-sent event, as @fastify/sse sends it (`data` is serialized as JSON unless a string). */
export type SseMessage = string | { readonly data: unknown }

/**
 * Writes one reply's server-sent events and says when its client has gone.
 *
 * @fastify/sse's `send` waits for `drain` on a socket that is full, and a client that closes the
 * socket instead never sends it: the route's loop waited forever, holding the request and its
 * generations, and counted it as nothing. Its `send` also throws once the connection is closed.
 * Here a send settles as soon as the reply closes and reports `false` instead of throwing, so a
 * route handles "the client left" as an ordinary outcome.
 */
export class SseWriter {
  readonly #reply: FastifyReply
  readonly #closed: Promise<void>
  #open: boolean

  constructor(reply: FastifyReply) {
    this.#reply = reply
    this.#open = !reply.raw.destroyed && !reply.raw.writableEnded
    this.#closed = new Promise((resolve) => {
      if (!this.#open) return resolve()
      reply.raw.once('close', () => {
        this.#open = false
        resolve()
      })
    })
  }

  /** False once the client has gone (or the stream ended). */
  get open(): boolean {
    return this.#open && this.#reply.sse.isConnected
  }

  /** Send `message`; resolves `true` when it was handed to the socket, `false` when the client has gone. */
  async send(message: SseMessage): Promise<boolean> {
    if (!this.open) return false
    try {
      await Promise.race([this.#reply.sse.send(message), this.#closed])
    } catch (err) {
      // A write that failed because the client left is the client leaving, not a server fault.
      if (this.open) throw err
    }
    return this.open
  }
}
