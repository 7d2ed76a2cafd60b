import type { ServerOptions } from 'node:http'

/** How long a client may take to send a request, and to send the next one on a kept-alive connection. */
export interface HttpTimeouts {
  /** From the connection (or the end of the previous request) until the headers are in (`server.headers_timeout_s`). */
  readonly headersMs: number
  /** Until the whole request, body included, is in, counted like `headersMs` (`server.request_timeout_s`). */
  readonly requestMs: number
  /** An idle kept-alive connection is closed after this (`server.keep_alive_timeout_s`). */
  readonly keepAliveMs: number
}

/** The defaults of `server.*_timeout_s` in the config schema. */
export const DEFAULT_HTTP_TIMEOUTS: HttpTimeouts = { headersMs: 10_000, requestMs: 60_000, keepAliveMs: 5_000 }

/** The fastify options that apply `timeouts` to its Node HTTP server. */
export function serverTimeoutOptions(timeouts: HttpTimeouts): {
  requestTimeout: number
  keepAliveTimeout: number
  connectionTimeout: number
  http: ServerOptions
} {
  const { headersMs, requestMs, keepAliveMs } = timeouts
  return {
    // Node counts both timeouts only while a request is being received: once it is in, an answer
    // (a generation, a long stream) takes as long as it needs.
    requestTimeout: requestMs,
    keepAliveTimeout: keepAliveMs,
    // No socket idle timeout: a generation may write nothing for a long time (a long prefill, an
    // adapter download, heartbeats off), and Node would destroy its socket.
    connectionTimeout: 0,
    http: {
      // Node refuses a headers timeout longer than the request timeout (the config checks it too).
      headersTimeout: Math.min(headersMs, requestMs),
      requestTimeout: requestMs,
      keepAliveTimeout: keepAliveMs,
      // Node checks both timeouts every 30 s by default, so a 10 s timeout could take 40 s to fire.
      connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(Math.min(headersMs, requestMs) / 4))),
    },
  }
}
