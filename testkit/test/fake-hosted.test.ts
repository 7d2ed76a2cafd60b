import t, { type Test } from 'tap'
import { FakeHostedServer } from '../src/index.ts'

const CONFIG = '{"peft_type":"LORA","r":4}'
const WEIGHTS = Buffer.alloc(10_000, 7)

async function start(t: Test): Promise<FakeHostedServer> {
  const fake = await FakeHostedServer.start()
  t.teardown(() => fake.close())
  await fake.addVersion('poet', 1, { files: { 'adapter_config.json': CONFIG, 'adapter_model.safetensors': WEIGHTS } })
  await fake.addVersion('poet', 2, { files: { 'adapter_config.json': CONFIG } }, 'training')
  fake.addToken('tok-a', ['poet'])
  fake.addToken('tok-b', [])
  return fake
}

const get = (fake: FakeHostedServer, path: string, token?: string, headers: Record<string, string> = {}) =>
  fetch(`${fake.url}${path}`, {
    headers: { ...headers, ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
  })

t.test('metadata, latest, files and ranges', async (t) => {
  const fake = await start(t)
  const v1 = await get(fake, '/v2/repos/poet/version/1', 'tok-a')
  t.equal(v1.status, 200)
  t.match(await v1.json(), {
    repo: 'poet',
    version: 1,
    status: 'completed',
    files: [
      { path: 'adapter_config.json', size: CONFIG.length, sha256: /^[0-9a-f]{64}$/ },
      { path: 'adapter_model.safetensors', size: 10_000 },
    ],
  })
  t.match(await (await get(fake, '/v2/repos/poet', 'tok-a')).json(), { version: 1 }, 'latest completed version')
  t.same(await (await get(fake, '/v2/repos/poet/version/2', 'tok-a')).json(), {
    repo: 'poet',
    version: 2,
    status: 'training',
    files: [],
  })
  fake.setStatus('poet', 2, 'completed')
  t.match(
    await (await get(fake, '/v2/repos/poet', 'tok-a')).json(),
    { version: 2 },
    'a newly completed version is latest',
  )

  const file = await get(fake, '/v2/repos/poet/version/1/files/adapter_model.safetensors', 'tok-a')
  t.equal(file.status, 200)
  t.ok(Buffer.from(await file.arrayBuffer()).equals(WEIGHTS))
  const part = await get(fake, '/v2/repos/poet/version/1/files/adapter_model.safetensors', 'tok-a', {
    range: 'bytes=9000-',
  })
  t.equal(part.status, 206)
  t.equal(part.headers.get('content-range'), 'bytes 9000-9999/10000')
  t.equal((await part.arrayBuffer()).byteLength, 1000)
  t.equal(fake.downloads('poet', 1, 'adapter_model.safetensors'), 2)
  t.equal(fake.downloads('poet', 1), 2)
})

t.test('tokens: missing, unknown, revoked, forbidden, public', async (t) => {
  const fake = await start(t)
  t.equal((await get(fake, '/v2/repos/poet/version/1')).status, 401, 'no token')
  t.equal((await get(fake, '/v2/repos/poet/version/1', 'nope')).status, 401, 'unknown token')
  t.equal((await get(fake, '/v2/repos/poet/version/1', 'tok-b')).status, 403, 'no access')
  fake.grant('tok-b', 'poet')
  t.equal((await get(fake, '/v2/repos/poet/version/1', 'tok-b')).status, 200, 'granted')
  fake.deny('tok-b', 'poet')
  t.equal((await get(fake, '/v2/repos/poet/version/1', 'tok-b')).status, 403, 'denied again')
  fake.revokeToken('tok-a')
  t.equal((await get(fake, '/v2/repos/poet/version/1', 'tok-a')).status, 401, 'revoked')
  t.equal((await get(fake, '/v2/repos/ghost', 'tok-b')).status, 404, 'unknown repo')
  t.equal((await get(fake, '/v2/repos/poet/version/9', 'tok-b')).status, 403, 'access is checked before versions')
  fake.addRepo('open', { public: true })
  await fake.addVersion('open', 1, { files: { 'adapter_config.json': CONFIG } })
  t.equal((await get(fake, '/v2/repos/open/version/1')).status, 200, 'public without a token')
  t.equal((await get(fake, '/v2/repos/open/version/1', 'tok-a')).status, 401, 'a revoked token is refused even there')
  t.ok(
    fake.requests.every((r) => !JSON.stringify(r).includes('tok-')),
    'the request log never holds a token',
  )
})

t.test('failure injection and a clean close', async (t) => {
  const fake = await start(t)
  fake.failNext(2)
  t.equal((await get(fake, '/v2/repos/poet', 'tok-a')).status, 503)
  t.equal((await get(fake, '/v2/repos/poet', 'tok-a')).status, 503)
  t.equal((await get(fake, '/v2/repos/poet', 'tok-a')).status, 200)

  fake.dropNextDownload('adapter_model.safetensors', 4096)
  const broken = await get(fake, '/v2/repos/poet/version/1/files/adapter_model.safetensors', 'tok-a')
  t.equal(broken.status, 200)
  await t.rejects(broken.arrayBuffer(), 'the body ends early')
  const whole = await get(fake, '/v2/repos/poet/version/1/files/adapter_model.safetensors', 'tok-a')
  t.equal((await whole.arrayBuffer()).byteLength, 10_000, 'only the next download is dropped')
  t.equal(fake.metadataRequests('poet'), 3)

  // A keep-alive connection is open now; close() must still finish at once.
  const url = fake.url
  await fake.close()
  await fake.close()
  await t.rejects(fetch(`${url}/v2/repos/poet`), 'closed')
})
