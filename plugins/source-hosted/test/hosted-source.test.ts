import { createHash, randomBytes } from 'node:crypto'
import { readFile, readdir } from 'node:fs/promises'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { AdapterSource, AuthChecker, Logger, SourceContext } from '@loom/core'
import { FakeHostedServer } from '@loom/testkit'
import plugin from '../src/index.ts'

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {}, child: () => silent }
const CONFIG = JSON.stringify({ peft_type: 'LORA', r: 8, lora_alpha: 16 })
const WEIGHTS = randomBytes(200 * 1024 + 3)
const TOKEN = 'pb-test-token-3c1d9e'

function context(token?: string, signal = new AbortController().signal): SourceContext {
  return token === undefined ? { signal, logger: silent } : { token, signal, logger: silent }
}

interface Registered {
  readonly fake: FakeHostedServer
  readonly source: AdapterSource
  readonly checker: AuthChecker
}

async function setup(t: Test, options: Record<string, unknown> = {}): Promise<Registered> {
  const fake = await FakeHostedServer.start()
  t.teardown(() => fake.close())
  await fake.addVersion('poet', 1, {
    files: { 'adapter_config.json': CONFIG, 'adapter_model.safetensors': WEIGHTS, 'tokenizer.json': '{}' },
  })
  await fake.addVersion('poet', 2, { files: { 'adapter_config.json': CONFIG } }, 'training')
  fake.addToken(TOKEN, ['poet'])
  const provided: unknown[] = []
  await plugin.register(
    {
      server: { modelPath: '/m', modelId: 'm', cacheDir: '/c', configDir: '/', limits: {} },
      logger: silent,
      provide: (_token, impl) => void provided.push(impl),
      onClose: () => {},
    },
    plugin.options.parse({ endpoint: fake.url, retry_base_ms: 1, ...options }),
  )
  return { fake, source: provided[0] as AdapterSource, checker: provided[1] as AuthChecker }
}

t.test('resolve pins a version and fetch downloads its files with checked hashes', async (t) => {
  const { fake, source } = await setup(t)
  t.equal(source.name, 'pbase', 'the default name')
  const resolved = await source.resolve({ source: 'pbase', id: 'poet/1' }, context(TOKEN))
  t.match(resolved, {
    source: 'pbase',
    id: 'poet/1',
    revision: /^1-[0-9a-f]{12}$/,
    files: [
      { path: 'adapter_config.json', size: CONFIG.length, sha256: /^[0-9a-f]{64}$/ },
      {
        path: 'adapter_model.safetensors',
        size: WEIGHTS.length,
        sha256: createHash('sha256').update(WEIGHTS).digest('hex'),
      },
      { path: 'tokenizer.json', size: 2 },
    ],
  })
  const latest = await source.resolve({ source: 'pbase', id: 'poet' }, context(TOKEN))
  t.equal(latest.revision, resolved.revision, '`poet` is the latest completed version, 1')

  const dest = t.testdir({})
  await source.fetch(resolved, dest, context(TOKEN))
  t.same((await readdir(dest)).sort(), ['adapter_config.json', 'adapter_model.safetensors', 'tokenizer.json'])
  t.ok((await readFile(path.join(dest, 'adapter_model.safetensors'))).equals(WEIGHTS))
  t.equal(fake.downloads('poet', 1), 3, 'one GET per file')

  fake.setStatus('poet', 2, 'completed')
  const moved = await source.resolve({ source: 'pbase', id: 'poet' }, context(TOKEN))
  t.match(moved.revision, /^2-/, 'the latest moves when a newer version completes')
})

t.test('status and auth answers map to Loom errors', async (t) => {
  const { fake, source } = await setup(t)
  const resolve = (id: string, token?: string) => source.resolve({ source: 'pbase', id }, context(token))
  await t.rejects(resolve('poet/2', TOKEN), {
    code: 'adapter_not_ready',
    message:
      'Adapter `poet/2` from `pbase` is not ready for use (status `training`): version 2 has no weights until training has completed; retry later',
  })
  fake.setStatus('poet', 2, 'errored')
  await t.rejects(resolve('poet/2', TOKEN), {
    code: 'adapter_invalid',
    message: /version 2 ended with status `errored` and has no usable weights/,
  })
  await t.rejects(resolve('poet/1'), { code: 'auth_missing' })
  await t.rejects(resolve('poet/1', 'wrong-token'), {
    code: 'auth_invalid',
    message:
      'The token was refused for adapter `poet/1`: the hosted repository does not accept it (unknown or revoked)',
  })
  fake.addToken('other', [])
  await t.rejects(resolve('poet/1', 'other'), { code: 'auth_forbidden' })
  await t.rejects(resolve('poet/7', TOKEN), {
    code: 'adapter_not_found',
    message: 'Adapter `poet/7` was not found in source `pbase`',
  })
  await t.rejects(resolve('ghost', TOKEN), { code: 'adapter_not_found' })
  for (const id of ['a/b/c', 'poet/0', 'poet/v1', '../x', '', 'poet/']) {
    await t.rejects(
      resolve(id, TOKEN),
      {
        code: 'adapter_id_invalid',
        message: /expected <repo>\/<version> or <repo> \(the latest version\), for example my-adapter\/3/,
      },
      `invalid id ${JSON.stringify(id)}`,
    )
  }
  await fake.addVersion('notes', 1, { files: { 'README.md': 'hi' } })
  fake.grant(TOKEN, 'notes')
  await t.rejects(resolve('notes/1', TOKEN), { code: 'adapter_invalid', message: /neither adapter_config.json/ })
})

t.test('the checker asks the repository on every call', async (t) => {
  const { fake, checker } = await setup(t)
  t.equal(checker.source, 'pbase')
  const check = (id: string, token?: string) =>
    checker.check({ source: 'pbase', id }, token, new AbortController().signal)
  t.same(await check('poet/1', TOKEN), { allowed: true })
  t.same(await check('poet/2', TOKEN), { allowed: true }, 'access does not depend on training status')
  t.match(await check('poet/1'), { allowed: false, reason: 'missing' })
  t.match(await check('poet/1', 'nope'), { allowed: false, reason: 'invalid' })
  fake.deny(TOKEN, 'poet')
  t.match(await check('poet/1', TOKEN), { allowed: false, reason: 'forbidden' }, 'a withdrawn grant is seen at once')
  fake.grant(TOKEN, 'poet')
  t.same(await check('poet', TOKEN), { allowed: true })
  fake.revokeToken(TOKEN)
  t.match(
    await check('poet/1', TOKEN),
    {
      allowed: false,
      reason: 'invalid',
      message: 'the hosted repository does not accept the token (unknown or revoked)',
    },
    'a revoked token is refused on the next call',
  )
  fake.addToken('fresh', '*')
  await t.rejects(check('ghost/1', 'fresh'), { code: 'adapter_not_found' }, 'an unknown repo is a 404, not a denial')
  t.equal(fake.metadataRequests('poet'), 7, 'seven checks, seven requests: nothing cached')

  fake.failNext(10)
  await t.rejects(
    check('poet/1', TOKEN),
    /the hosted repository did not answer: GET \/v2\/repos\/poet\/version\/1 answered HTTP 503/,
  )
})

t.test('the fallback token is used only when a request sends none', async (t) => {
  const { fake, source, checker } = await setup(t, { token: TOKEN })
  const resolved = await source.resolve({ source: 'pbase', id: 'poet/1' }, context())
  t.match(resolved.revision, /^1-/, 'no request token: the server token reads the adapter')
  t.same(await checker.check({ source: 'pbase', id: 'poet/1' }, undefined, new AbortController().signal), {
    allowed: true,
  })
  await t.rejects(
    source.resolve({ source: 'pbase', id: 'poet/1' }, context('someone-else')),
    {
      code: 'auth_invalid',
    },
    'a request token wins over the fallback',
  )
  t.ok(fake.requests.every((r) => r.withToken))
})

t.test('transient failures: retried metadata, resumed downloads, hash checks', async (t) => {
  const { fake, source } = await setup(t)
  fake.failNext(2)
  const resolved = await source.resolve({ source: 'pbase', id: 'poet/1' }, context(TOKEN))
  t.equal(fake.requests.filter((r) => r.status === 503).length, 2, 'two 503s were retried')

  fake.failNext(3)
  await t.rejects(source.resolve({ source: 'pbase', id: 'poet/1' }, context(TOKEN)), {
    code: 'adapter_source_unavailable',
    message: /answered HTTP 503/,
  })

  fake.dropNextDownload('adapter_model.safetensors', 50_000)
  const dest = t.testdir({})
  await source.fetch(resolved, dest, context(TOKEN))
  t.ok((await readFile(path.join(dest, 'adapter_model.safetensors'))).equals(WEIGHTS), 'resumed file is exact')
  const weightGets = fake.requests.filter((r) => r.path.endsWith('/adapter_model.safetensors'))
  // The client may have received less than the fake wrote before cutting; it resumes from what it holds.
  t.equal(weightGets.length, 2, 'one dropped transfer, one resumed')
  t.same([weightGets[0]?.status, weightGets[0]?.range, weightGets[1]?.status], [0, undefined, 206])
  const resumedAt = Number(/^bytes=(\d+)-$/.exec(weightGets[1]?.range ?? '')?.[1])
  t.ok(resumedAt > 0 && resumedAt <= 50_000, `resumed at byte ${resumedAt}, not from the start`)

  const lying = { ...resolved, files: resolved.files.map((f) => ({ ...f, sha256: f.sha256 && '0'.repeat(64) })) }
  await t.rejects(source.fetch(lying, t.testdir({}), context(TOKEN)), {
    code: 'adapter_download_failed',
    message: /has SHA-256 [0-9a-f]{64}, the repository listed 0{64}/,
  })

  const cancelled = new AbortController()
  cancelled.abort(new Error('request cancelled'))
  await t.rejects(source.fetch(resolved, t.testdir({}), context(TOKEN, cancelled.signal)), /request cancelled/)
  await t.rejects(
    source.resolve({ source: 'pbase', id: 'poet/1' }, context(TOKEN, cancelled.signal)),
    /request cancelled/,
  )

  const endpoint = fake.url
  await fake.close()
  const again = await setupClosed(endpoint)
  await t.rejects(again.resolve({ source: 'pbase', id: 'poet/1' }, context(TOKEN)), {
    code: 'adapter_source_unavailable',
    message:
      /^Adapter source `pbase` could not be reached for `poet\/1`: GET \/v2\/repos\/poet\/version\/1 fetch failed \(ECONNREFUSED\)$/,
  })
})

async function setupClosed(endpoint: string): Promise<AdapterSource> {
  const provided: unknown[] = []
  await plugin.register(
    {
      server: { modelPath: '/m', modelId: 'm', cacheDir: '/c', configDir: '/', limits: {} },
      logger: silent,
      provide: (_token, impl) => void provided.push(impl),
      onClose: () => {},
    },
    plugin.options.parse({ endpoint, retry_base_ms: 1, max_attempts: 2 }),
  )
  return provided[0] as AdapterSource
}

t.test('concurrent identical resolves share one request; tokens never reach errors', async (t) => {
  const { fake, source } = await setup(t)
  const all = await Promise.all(
    Array.from({ length: 25 }, () => source.resolve({ source: 'pbase', id: 'poet/1' }, context(TOKEN))),
  )
  t.equal(new Set(all.map((r) => r.revision)).size, 1)
  t.equal(fake.metadataRequests('poet'), 1, 'twenty-five callers, one metadata request')
  const errors = await Promise.all(
    ['poet/1', 'poet/2', 'ghost'].map((id) =>
      source.resolve({ source: 'pbase', id }, context('secret-token-xyz')).catch((e: Error) => e),
    ),
  )
  for (const err of errors) t.notMatch(JSON.stringify({ m: (err as Error).message, ...err }), 'secret-token-xyz')
})
