import type { FastifyInstance, FastifyRequest } from 'fastify'
import { LoomError } from '../errors/loom-error.ts'

/**
 * Loom's only body parser: JSON. It replaces fastify's defaults so that (1) any other Content-Type,
 * `text/plain` included, is refused with 415 before a route sees a string body, and (2) a syntax
 * error says where it is. fastify's own parser drops that detail.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'string' }, parseJsonBody)
}

function parseJsonBody(
  _request: FastifyRequest,
  body: string | Buffer,
  done: (err: Error | null, body?: unknown) => void,
) {
  const text = typeof body === 'string' ? body : body.toString('utf8')
  if (text.trim() === '') {
    done(new LoomError('invalid_json', { detail: 'the body is empty' }))
    return
  }
  try {
    done(null, JSON.parse(text, rejectPrototypeKeys))
  } catch (err) {
    if (err instanceof LoomError) done(err)
    else if (err instanceof RangeError) {
      // Valid JSON nested deeper than the parser's stack: say so, not "invalid".
      done(new LoomError('bad_request', { detail: 'the JSON body is nested too deeply' }))
    } else done(new LoomError('invalid_json', { detail: describeSyntaxError(err) }))
  }
}

/**
 * `__proto__` and `constructor.prototype` keys are refused, as fastify's parser does: a body copied
 * with `Object.assign` or a spread must never be able to change an object's prototype.
 */
function rejectPrototypeKeys(key: string, value: unknown): unknown {
  if (
    key === '__proto__' ||
    (key === 'constructor' && typeof value === 'object' && value !== null && 'prototype' in value)
  ) {
    throw new LoomError('invalid_json', { detail: `the key \`${key}\` is not allowed` })
  }
  return value
}

/**
 * V8's message without the excerpt of the body it may quote (`…, "{"api_token": …" is not valid
 * JSON`): the message is logged, and the body may hold a token.
 */
function describeSyntaxError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err)
  const head = message.split(/,\s*"/)[0] ?? message
  return head.slice(0, 160)
}
