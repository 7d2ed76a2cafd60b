import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from '../../../core/test/server/test-server.ts'
import { S3Fixture, S3_KEY_ID } from './s3-fixture.ts'

/** s3rver accepts any secret for its key id, so the test can use a distinctive one and look for it. */
const SECRET = 'loom-e2e-aws-secret-5d8e1f0a'

/**
 * Acceptance (issue 4): an adapter in S3 (s3rver behind a counting proxy) generates exactly like
 * the same files from the local source; 100 concurrent requests for the cold adapter cause exactly
 * one GetObject per file and are all answered; the AWS secret never reaches the logs.
 */
t.test('100 concurrent requests for one cold S3 adapter', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const model = await buildModel(modelDir, { seed: 7 })
  const adapters = join(dir, 'adapters')
  await buildLoraAdapter(join(adapters, 'poet'), { model, rank: 8, seed: 33 })

  const store = await mkdtemp(join(tmpdir(), 'loom-s3rver-'))
  const fixture = await S3Fixture.start(store, ['team-adapters'])
  t.teardown(async () => {
    await fixture.close()
    await rm(store, { recursive: true, force: true })
  })
  await fixture.uploadDir(join(adapters, 'poet'), 'team-adapters', 'loras/poet')
  const files = await readdir(join(adapters, 'poet'))

  const saved = { ...process.env }
  t.teardown(() => {
    process.env = saved
  })
  process.env.AWS_ACCESS_KEY_ID = S3_KEY_ID
  process.env.AWS_SECRET_ACCESS_KEY = SECRET
  const test = await startTestServer(join(dir, 'server'), modelDir, {
    adapterRoot: adapters,
    logLevel: 'trace',
    limits: { max_concurrent_requests: 256 },
    plugins: [{ use: '@loom/source-s3', options: { endpoint: fixture.url, retry_base_ms: 5 } }],
  })
  t.teardown(() => test.close())
  const generate = async (parameters: Record<string, unknown>) => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      payload: { inputs: 'Shall I compare thee', parameters: { max_new_tokens: 8, ...parameters } },
    })
    return { status: res.statusCode, body: res.json() as { generated_text: string; error?: string } }
  }

  const s3 = { adapter_id: 's3://team-adapters/loras/poet', adapter_source: 's3' }
  const answers = await Promise.all(Array.from({ length: 100 }, () => generate(s3)))
  t.same(
    answers.map((a) => a.status),
    Array(100).fill(200),
    'all 100 answered',
  )
  // The README's other spelling of the same id: the same adapter, not a second download.
  const slash = await generate({ adapter_id: 's3://team-adapters/loras/poet/', adapter_source: 's3' })
  t.equal(slash.status, 200)
  t.equal(slash.body.generated_text, answers[0]?.body.generated_text, 'a trailing slash serves the same adapter')
  const local = await generate({ adapter_id: 'poet', adapter_source: 'local' })
  t.equal(local.status, 200)
  t.same(new Set(answers.map((a) => a.body.generated_text)), new Set([local.body.generated_text]), 'same text as local')
  const base = await generate({})
  t.not(base.body.generated_text, local.body.generated_text, 'the adapter changes the output')
  for (const file of files.filter((f) => f !== 'README.md')) {
    t.equal(fixture.gets(`team-adapters/loras/poet/${file}`), 1, `exactly one GetObject of ${file}`)
  }

  const missing = await generate({ adapter_id: 's3://team-adapters/loras/nobody', adapter_source: 's3' })
  t.equal(missing.status, 404)
  const invalid = await generate({ adapter_id: 'team-adapters/loras/poet', adapter_source: 's3' })
  t.equal(invalid.status, 422)
  t.match(invalid.body.error, /expected s3:\/\/<bucket>\/<path>/)

  const logs = test.logs.join('')
  t.match(logs, /incoming request/, 'request logs were captured')
  t.notMatch(logs, SECRET, 'the AWS secret never appears in the logs')
})
