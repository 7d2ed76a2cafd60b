import { randomBytes } from 'node:crypto'
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { createServer } from 'node:net'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { AdapterSource, Logger, SourceContext } from '@loom/core'
import plugin from '../src/index.ts'
import { S3AdapterSource, type S3SourceOptions } from '../src/s3-source.ts'
import { S3Fixture, S3_KEY_ID, S3_SECRET } from './s3-fixture.ts'

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {}, child: () => silent }
const BUCKET = 'adapters'
const WEIGHTS = randomBytes(300 * 1024 + 11)
const CONFIG = JSON.stringify({ peft_type: 'LORA', r: 8, lora_alpha: 16 })

function context(signal = new AbortController().signal): SourceContext {
  return { signal, logger: silent }
}

function sourceFor(fixture: S3Fixture, overrides: Partial<S3SourceOptions> = {}): S3AdapterSource {
  const source = new S3AdapterSource({
    name: 's3',
    endpoint: fixture.url,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: S3_KEY_ID, secretAccessKey: S3_SECRET },
    retry: { attempts: 3, baseMs: 5 },
    listTimeoutMs: 10_000,
    requestTimeoutMs: 10_000,
    maxListPages: 10,
    ...overrides,
  })
  return source
}

async function startFixture(t: Test): Promise<S3Fixture> {
  // Not t.testdir(): a later t.testdir() call in the same test would wipe the store.
  const store = await mkdtemp(path.join(tmpdir(), 'loom-s3rver-'))
  const fixture = await S3Fixture.start(store, [BUCKET])
  t.teardown(async () => {
    await fixture.close()
    await rm(store, { recursive: true, force: true })
  })
  await fixture.put(BUCKET, 'loras/poet/adapter_config.json', CONFIG)
  await fixture.put(BUCKET, 'loras/poet/adapter_model.safetensors', WEIGHTS)
  await fixture.put(BUCKET, 'loras/poet/adapter_model.bin', Buffer.from('a pickle nobody should download'))
  await fixture.put(BUCKET, 'loras/poet/tokenizer.json', '{"model":{}}')
  await fixture.put(BUCKET, 'loras/poet/README.md', '# not needed at runtime')
  await fixture.put(BUCKET, 'loras/poet/checkpoint-100/adapter_model.safetensors', 'old weights')
  return fixture
}

t.test('resolve lists the adapter files, fetch streams them to disk', async (t) => {
  const fixture = await startFixture(t)
  const source = sourceFor(fixture)
  t.teardown(() => source.close())
  const ref = { source: 's3', id: 's3://adapters/loras/poet' }

  const resolved = await source.resolve(ref, context())
  t.same(
    resolved.files,
    [
      { path: 'adapter_config.json', size: CONFIG.length },
      { path: 'adapter_model.safetensors', size: WEIGHTS.length },
      { path: 'tokenizer.json', size: 12 },
    ],
    'config, safetensors (not .bin), tokenizer; no README, no sub-folders',
  )
  t.match(resolved.revision, /^[0-9a-f]{32}$/)
  t.equal(resolved.localDir, undefined)
  t.equal(resolved.id, 's3://adapters/loras/poet')
  const slash = await source.resolve({ source: 's3', id: 's3://adapters/loras/poet/' }, context())
  t.equal(slash.revision, resolved.revision, 'a trailing slash names the same adapter')
  t.equal(slash.id, resolved.id, 'under the same id, so the core caches and loads it once')

  const dest = t.testdir({})
  await source.fetch(resolved, dest, context())
  t.same((await readdir(dest)).sort(), ['adapter_config.json', 'adapter_model.safetensors', 'tokenizer.json'])
  t.ok((await readFile(path.join(dest, 'adapter_model.safetensors'))).equals(WEIGHTS), 'weights are byte-exact')
  t.equal(fixture.gets('adapters/loras/poet/adapter_model.safetensors'), 1, 'one GetObject per file')
  t.equal(fixture.gets('adapters/loras/poet/adapter_model.bin'), 0, 'the .bin twin is never downloaded')

  await fixture.put(BUCKET, 'loras/poet/adapter_model.safetensors', Buffer.concat([WEIGHTS, Buffer.from('!')]))
  const changed = await source.resolve(ref, context())
  t.not(changed.revision, resolved.revision, 'a replaced file gives a new revision')
  await t.rejects(
    source.fetch(resolved, t.testdir({}), context()),
    { code: 'adapter_download_failed' },
    'the old revision cannot be fetched once its file was replaced',
  )
})

t.test('ids are checked and name the expected form', async (t) => {
  const fixture = await startFixture(t)
  const source = sourceFor(fixture)
  t.teardown(() => source.close())
  for (const id of [
    'adapters/loras/poet',
    's3://adapters',
    's3://adapters/',
    's3://Bad_Bucket/x',
    's3://adapters/a/../b',
    's3://adapters/a//b',
    's3://adapters//a',
    's3://adapters/a//',
    's3://127.0.0.1/loras/poet',
    's3://192.168.5.4/loras/poet',
    's3://my..adapters/loras/poet',
  ]) {
    await t.rejects(
      source.resolve({ source: 's3', id }, context()),
      {
        code: 'adapter_id_invalid',
        message: /expected s3:\/\/<bucket>\/<path>, for example s3:\/\/my-adapters\/loras\/poet/,
      },
      id,
    )
  }
  t.equal(fixture.seen.length, 0, 'nothing was sent for an invalid id')
  for (const bucket of ['127.0.0.1', 'my..adapters']) {
    await t.rejects(
      source.resolve({ source: 's3', id: `s3://${bucket}/loras/poet` }, context()),
      {
        message: `Invalid adapter id \`s3://${bucket}/loras/poet\` for source \`s3\`: expected s3://<bucket>/<path>, for example s3://my-adapters/loras/poet (\`${bucket}\` is not a valid bucket name)`,
      },
      `${bucket}: the message every invalid bucket name gets`,
    )
  }
  for (const bucket of ['1.2.3.4.5', '10.0.0.1a', 'a.b.c']) {
    await t.rejects(
      source.resolve({ source: 's3', id: `s3://${bucket}/x` }, context()),
      { code: 'adapter_not_found' },
      bucket,
    )
  }
})

t.test('both spellings of an id share one listing and one download', async (t) => {
  const fixture = await startFixture(t)
  const source = sourceFor(fixture)
  t.teardown(() => source.close())
  const [plain, slash] = await Promise.all([
    source.resolve({ source: 's3', id: 's3://adapters/loras/poet' }, context()),
    source.resolve({ source: 's3', id: 's3://adapters/loras/poet/' }, context()),
  ])
  t.equal(fixture.lists(), 1, 'one ListObjectsV2 for both spellings')
  t.same([plain?.id, slash?.id], ['s3://adapters/loras/poet', 's3://adapters/loras/poet'])
  t.equal(plain?.revision, slash?.revision)
})

t.test('missing, forbidden, not an adapter', async (t) => {
  const fixture = await startFixture(t)
  const source = sourceFor(fixture)
  t.teardown(() => source.close())
  await t.rejects(source.resolve({ source: 's3', id: 's3://adapters/loras/nobody' }, context()), {
    code: 'adapter_not_found',
    message: 'Adapter `s3://adapters/loras/nobody` was not found in source `s3`',
  })
  await t.rejects(source.resolve({ source: 's3', id: 's3://no-such-bucket/x' }, context()), {
    code: 'adapter_not_found',
  })
  await fixture.put(BUCKET, 'loras/notes/README.md', 'hello')
  await t.rejects(source.resolve({ source: 's3', id: 's3://adapters/loras/notes' }, context()), {
    code: 'adapter_invalid',
    message: /s3:\/\/adapters\/loras\/notes\/: neither adapter_config.json \(LoRA\) nor config.json \(Medusa\)/,
  })
  fixture.failNext(1, 403)
  await t.rejects(source.resolve({ source: 's3', id: 's3://adapters/loras/poet' }, context()), {
    code: 'auth_forbidden',
    message: /the server's S3 credentials may not list s3:\/\/adapters\/loras\/poet\/ \(HTTP 403 AccessDenied/,
  })
  t.equal(fixture.lists(), 4, 'a 403 is not retried')
})

t.test('credentials: refused or missing are named, never echoed', async (t) => {
  const fixture = await startFixture(t)
  const wrong = sourceFor(fixture, { credentials: { accessKeyId: 'NOT-A-KEY', secretAccessKey: 'super-secret-value' } })
  t.teardown(() => wrong.close())
  const err = await wrong.resolve({ source: 's3', id: 's3://adapters/loras/poet' }, context()).catch((e: Error) => e)
  t.match(err, {
    code: 'adapter_source_unavailable',
    message:
      /S3 refused the server's credentials \(HTTP 403 InvalidAccessKeyId.*\); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/,
  })
  t.notMatch((err as Error).message, 'super-secret-value')

  const saved = { ...process.env }
  t.teardown(() => {
    process.env = saved
  })
  delete process.env.AWS_ACCESS_KEY_ID
  delete process.env.AWS_SECRET_ACCESS_KEY
  process.env.AWS_ACCESS_KEY_ID = 'AKIA-ONLY-ID'
  const provided: AdapterSource[] = []
  const warnings: string[] = []
  const logger: Logger = { ...silent, warn: (_o: unknown, msg?: string) => void warnings.push(String(msg)) }
  await plugin.register(
    {
      server: { modelPath: '/m', modelId: 'm', cacheDir: '/c', configDir: '/', limits: {} },
      logger,
      provide: (_token, impl) => void provided.push(impl as AdapterSource),
      onClose: () => {},
    },
    plugin.options.parse({ endpoint: fixture.url }),
  )
  const source = provided[0]!
  t.equal(source.name, 's3', 'the default name')
  t.match(warnings, [/set AWS_SECRET_ACCESS_KEY \(and AWS_SESSION_TOKEN for temporary credentials\)/], 'startup warns')
  await t.rejects(source.resolve({ source: 's3', id: 's3://adapters/loras/poet' }, context()), {
    code: 'adapter_source_unavailable',
    message:
      'Adapter source `s3` could not be reached for `s3://adapters/loras/poet`: the server has no S3 credentials: set AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials) in its environment',
  })
  await t.rejects(
    source.resolve({ source: 's3', id: 'nope' }, context()),
    { code: 'adapter_id_invalid' },
    'ids are still checked first',
  )
})

t.test('transient failures are retried with backoff; a broken transfer resumes with Range', async (t) => {
  const fixture = await startFixture(t)
  const source = sourceFor(fixture)
  t.teardown(() => source.close())
  const ref = { source: 's3', id: 's3://adapters/loras/poet' }

  fixture.failNext(2)
  const resolved = await source.resolve(ref, context())
  t.equal(fixture.lists(), 3, 'two 503s, then the listing')

  fixture.failNext(3)
  await t.rejects(source.resolve(ref, context()), {
    code: 'adapter_source_unavailable',
    message: /HTTP 503 ServiceUnavailable/,
  })

  fixture.breakNextGet('adapters/loras/poet/adapter_model.safetensors', 100_000)
  const dest = t.testdir({})
  await source.fetch(resolved, dest, context())
  t.ok((await readFile(path.join(dest, 'adapter_model.safetensors'))).equals(WEIGHTS), 'the resumed file is exact')
  const gets = fixture.seen.filter((r) => r.path === '/adapters/loras/poet/adapter_model.safetensors')
  // The client may have received less than the proxy wrote before cutting; it resumes from what it holds.
  t.equal(gets.length, 2, 'one broken transfer, one resumed')
  t.equal(gets[0]?.range, undefined)
  const resumedAt = Number(/^bytes=(\d+)-$/.exec(gets[1]?.range ?? '')?.[1])
  t.ok(resumedAt > 0 && resumedAt <= 100_000, `resumed at byte ${resumedAt}, not from the start`)
})

t.test('concurrent resolves share one listing; cancellation is honoured', async (t) => {
  const fixture = await startFixture(t)
  const source = sourceFor(fixture)
  t.teardown(() => source.close())
  const ref = { source: 's3', id: 's3://adapters/loras/poet' }
  const all = await Promise.all(Array.from({ length: 20 }, () => source.resolve(ref, context())))
  t.equal(new Set(all.map((r) => r.revision)).size, 1)
  t.equal(fixture.lists(), 1, 'twenty callers, one ListObjectsV2')

  const cancelled = new AbortController()
  cancelled.abort(new Error('request cancelled'))
  await t.rejects(source.resolve(ref, context(cancelled.signal)), /request cancelled/)
  await t.rejects(source.fetch(all[0]!, t.testdir({}), context(cancelled.signal)), /request cancelled/)
})

t.test('an unreachable endpoint is adapter_source_unavailable', async (t) => {
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
  const source = new S3AdapterSource({
    name: 'store',
    endpoint: `http://127.0.0.1:${port}`,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'k', secretAccessKey: 's' },
    retry: { attempts: 2, baseMs: 1 },
    listTimeoutMs: 5000,
    requestTimeoutMs: 5000,
    maxListPages: 1,
  })
  t.teardown(() => source.close())
  await t.rejects(source.resolve({ source: 'store', id: 's3://b-1/x' }, context()), {
    code: 'adapter_source_unavailable',
    message: /^Adapter source `store` could not be reached for `s3:\/\/b-1\/x`: .*ECONNREFUSED/,
  })
})
