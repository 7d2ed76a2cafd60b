import t from 'tap'
import type { DestinationStream } from 'pino'
import { createLogger, isSecretField, redactObject, REDACTED } from '../../src/logging/index.ts'

function capture() {
  const lines: string[] = []
  const destination: DestinationStream = { write: (line: string) => void lines.push(line) }
  return { lines, destination, records: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) }
}

t.test('redactObject replaces secret fields at any depth and keeps the rest', async (t) => {
  const input = {
    inputs: 'hi',
    api_token: 'a',
    parameters: { api_token: 'b', max_new_tokens: 5, ignore_eos_token: true, adapter_id: 'org/x' },
    plugins: [{ options: { accessToken: 'c', nested: { deeper: { apiToken: 'd', token: 'e' } } } }],
    s3: { credentials: { accessKeyId: 'AKIA123', secretAccessKey: 'f', sessionToken: 'g' } },
    tokenizer: { eos_token: '</s>', bos_token: '<s>' },
    hfToken: 'h',
    note: 'see https://x/y?api_token=i',
  }
  t.strictSame(redactObject(input), {
    inputs: 'hi',
    api_token: REDACTED,
    parameters: { api_token: REDACTED, max_new_tokens: 5, ignore_eos_token: true, adapter_id: 'org/x' },
    plugins: [{ options: { accessToken: REDACTED, nested: { deeper: { apiToken: REDACTED, token: REDACTED } } } }],
    s3: { credentials: { accessKeyId: 'AKIA123', secretAccessKey: REDACTED, sessionToken: REDACTED } },
    tokenizer: { eos_token: '</s>', bos_token: '<s>' },
    hfToken: REDACTED,
    note: `see https://x/y?api_token=${REDACTED}`,
  })
  t.equal(input.api_token, 'a', 'the input is not modified')
})

t.test('redactObject survives cycles, shared values and prototype keys', async (t) => {
  const shared = { token: 'x' }
  const cyclic: Record<string, unknown> = { a: shared, b: shared }
  cyclic.self = cyclic
  t.strictSame(redactObject(cyclic), { a: { token: REDACTED }, b: { token: REDACTED }, self: '[Circular]' })
  const withProto = JSON.parse('{"__proto__": {"token": "x"}}') as object
  const copy = redactObject(withProto)
  t.equal(Object.getPrototypeOf(copy), Object.prototype, 'the copy keeps a plain prototype')
  t.strictSame(Object.getOwnPropertyDescriptor(copy, '__proto__')?.value, { token: REDACTED })
})

t.test('isSecretField', async (t) => {
  t.ok(isSecretField('Authorization', 'Bearer x'))
  t.ok(isSecretField('api-token', 'x'))
  t.ok(isSecretField('predibase_api_token', 'x'))
  t.notOk(isSecretField('max_new_tokens', 5))
  t.notOk(isSecretField('eos_token', '</s>'))
  t.notOk(isSecretField('api_token', null), 'nothing to hide')
})

t.test('the logger redacts objects, messages, format arguments, errors and child bindings', async (t) => {
  const { destination, records } = capture()
  const log = createLogger({ level: 'debug', destination })
  log.info({ body: { parameters: { api_token: 'SECRET1' } } }, 'sent Bearer SECRET2')
  log.info('fetching %s', 'https://x/y?api_token=SECRET3')
  const err = Object.assign(new Error('GET https://x/?api_token=SECRET4 failed'), {
    request: { headers: { authorization: 'Bearer SECRET5' } },
  })
  log.error(err)
  log.error({ err }, 'upstream failed')
  log.child({ token: 'SECRET6', plugin: 'source-hub' }).warn({ apiToken: 'SECRET7' }, 'child')
  log.debug({ cause: new Error('not walked, and serialized as {}') }, 'class instances pass through')
  const text = JSON.stringify(records())
  t.notMatch(text, /SECRET\d/)
  const [first, second, third, fourth, fifth] = records()
  t.match(first, { body: { parameters: { api_token: REDACTED } }, msg: `sent Bearer ${REDACTED}` })
  t.match(second, { msg: `fetching https://x/y?api_token=${REDACTED}` })
  t.match(third, { msg: `GET https://x/?api_token=${REDACTED} failed`, err: { type: 'Error' } })
  t.match(fourth, { err: { request: { headers: { authorization: REDACTED } } } })
  t.match(fifth, { token: REDACTED, plugin: 'source-hub', apiToken: REDACTED })
})

t.test('levels apply', async (t) => {
  const { lines, destination } = capture()
  const log = createLogger({ level: 'warn', destination })
  log.info({}, 'dropped')
  log.warn({}, 'kept')
  t.equal(lines.length, 1)
  const silent = capture()
  createLogger({ level: 'silent', destination: silent.destination }).error({}, 'dropped')
  t.equal(silent.lines.length, 0)
})
