import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { LoomError } from '../errors/loom-error.ts'
import type { LoomLogger } from '../logging/create-logger.ts'
import { pathOf } from './api-family.ts'
import { errorFamily } from './error-family.ts'

/** What the answers to client errors quote and where they are logged. */
export interface ClientErrorContext {
  /** `server.headers_timeout_s` in milliseconds, quoted by a headers timeout. */
  readonly headersTimeoutMs: number
  /** `server.request_timeout_s` in milliseconds, quoted by a request timeout. */
  readonly requestTimeoutMs: number
  readonly logger: LoomLogger
}

/** An error Node's HTTP server reports through `clientError`. */
export interface ClientError extends Error {
  readonly code?: string
  /** The bytes the parser was reading when it failed: a Buffer, on parse errors only. */
  readonly rawPacket?: unknown
}

// Node's own fields on an HTTP server socket: its parser (whose `incoming` is the request it parsed
// headers for last) and the response being written on it.
interface HttpSocket extends Socket {
  parser?: { incoming?: IncomingMessage | null } | null
  _httpMessage?: ServerResponse | null
}

// The start of a request line: the path is enough to pick the API family.
const REQUEST_LINE = /^[A-Z]{3,10} (\/[^\s]*)/

/**
 * The `clientError` handler: answers a request Node's HTTP parser could not frame (malformed, or
 * data after `Connection: close`), or that did not arrive in time, in Loom's error shape of the
 * request's API family. An answer never goes into a response already being written: a stream in
 * progress ends first, then the connection closes. Never throws: a client cannot stop the server.
 */
export function clientErrorHandler(ctx: ClientErrorContext): (err: ClientError, socket: Socket) => void {
  // Sockets already answered or waiting to be: a request timeout is reported again at every check.
  const handled = new WeakSet<Socket>()
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || socket.destroyed || handled.has(socket)) return
    handled.add(socket)
    try {
      answer(err, socket as HttpSocket, ctx)
    } catch (cause) {
      ctx.logger.error({ err: cause }, 'answering a client error failed')
      socket.destroy()
    }
  }
}

function answer(err: ClientError, socket: HttpSocket, ctx: ClientErrorContext): void {
  const incoming = socket.parser?.incoming ?? null
  // The request still being received, when the error concerns one whose headers were parsed.
  const pending = incoming !== null && !incoming.complete ? incoming : null
  const response = socket._httpMessage ?? null
  const path = requestPath(err, incoming)
  const { status, error } = describe(err, pending !== null, ctx)
  const write = (): void => {
    if (!socket.writable) {
      socket.destroy()
      return
    }
    const body = JSON.stringify(errorFamily(path ?? '/').payload(error))
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\n` +
        `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `connection: close\r\n\r\n${body}`,
    )
    socket.destroySoon()
  }
  ctx.logger.info(
    { code: error.code, status, clientError: err.code, url: path === null ? undefined : pathOf(path) },
    error.message,
  )
  if (response !== null && response.req !== pending) {
    // An earlier request's answer (a stream, maybe) is due first; this one follows it.
    response.once('finish', write)
  } else if (response !== null && response.headersSent) {
    // The failed request is already being answered: let that answer end, then close.
    response.once('finish', () => socket.destroySoon())
  } else if (response === null && pending !== null) {
    // Its answer was sent before its body arrived (a 413, say): nothing left to say.
    socket.destroy()
  } else write()
}

/** The path of the failed request: from its request line if the parser saw it, else Node's. */
function requestPath(err: ClientError, incoming: IncomingMessage | null): string | null {
  const raw = err.rawPacket
  const line = Buffer.isBuffer(raw) ? REQUEST_LINE.exec(raw.toString('latin1', 0, 2048)) : null
  return line?.[1] ?? incoming?.url ?? null
}

function describe(
  err: ClientError,
  bodyStarted: boolean,
  ctx: ClientErrorContext,
): { status: number; error: LoomError } {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      // Node reports both timeouts with one code; which one fired shows in how far the request got.
      return {
        status: 408,
        error: new LoomError('request_timeout', {
          detail: bodyStarted
            ? `the whole request took longer than ${seconds(ctx.requestTimeoutMs)} (server.request_timeout_s)`
            : `its headers took longer than ${seconds(ctx.headersTimeoutMs)} (server.headers_timeout_s)`,
        }),
      }
    case 'HPE_HEADER_OVERFLOW':
      return {
        status: 431,
        error: new LoomError('bad_request', { detail: 'the request headers are larger than the server accepts' }),
      }
    case 'HPE_CLOSED_CONNECTION':
      return {
        status: 400,
        error: new LoomError('bad_request', {
          detail:
            'the HTTP request is malformed (sent on a connection an earlier request closed with `Connection: close`)',
        }),
      }
    default:
      return { status: 400, error: new LoomError('bad_request', { detail: 'the HTTP request is malformed' }) }
  }
}

function seconds(ms: number): string {
  return `${ms / 1000} s`
}
