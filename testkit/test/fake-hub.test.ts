import { createHash, randomBytes } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import {
  downloadFile,
  fileDownloadInfo,
  fileExists,
  listFiles,
  modelInfo,
  pathsInfo,
  snapshotDownload,
  whoAmI,
  HubApiError,
} from '@huggingface/hub'
import { FakeHub } from '../src/index.ts'

const WEIGHTS = randomBytes(40_000)
const CONFIG = JSON.stringify({ peft_type: 'LORA', r: 8 })
const FILES = { 'adapter_config.json': CONFIG, 'adapter_model.safetensors': WEIGHTS, 'sub/notes.txt': 'hello' }
const sha256 = (bytes: Uint8Array | string) => createHash('sha256').update(bytes).digest('hex')

async function startHub(t: Test): Promise<FakeHub> {
  const hub = await FakeHub.start()
  t.teardown(() => hub.close())
  await hub.addRepo('acme/public', FILES)
  await hub.addRepo('acme/private', FILES, { private: true })
  await hub.addRepo('acme/gated', FILES, { gated: 'manual' })
  hub.addToken('hf_reader', { canRead: ['acme/private', 'acme/gated'], user: 'reader' })
  hub.addToken('hf_stranger', { user: 'stranger' })
  return hub
}

/** The status a failed @huggingface/hub call carried. */
async function statusOf(call: Promise<unknown>): Promise<number | string> {
  try {
    await call
    return 'ok'
  } catch (err) {
    return err instanceof HubApiError ? err.statusCode : String(err)
  }
}

t.test('model info, listing and paths-info through @huggingface/hub', async (t) => {
  const hub = await startHub(t)
  const hubUrl = hub.url
  const info = await modelInfo({ name: 'acme/public', hubUrl, additionalFields: ['sha'] })
  t.equal(info.name, 'acme/public')
  t.equal(info.sha, hub.sha('acme/public'))
  t.match(info.sha, /^[0-9a-f]{40}$/)
  t.equal(info.private, false)
  t.equal(info.gated, false)

  const files = []
  for await (const entry of listFiles({ repo: 'acme/public', hubUrl, recursive: true })) files.push(entry)
  t.same(
    files.map((f) => [f.type, f.path]),
    [
      ['file', 'adapter_config.json'],
      ['file', 'adapter_model.safetensors'],
      ['directory', 'sub'],
      ['file', 'sub/notes.txt'],
    ],
  )
  const weights = files.find((f) => f.path === 'adapter_model.safetensors')!
  t.same(weights.lfs, { oid: sha256(WEIGHTS), size: WEIGHTS.length, pointerSize: weights.lfs!.pointerSize })
  t.equal(files.find((f) => f.path === 'adapter_config.json')!.lfs, undefined, 'JSON files are not in LFS')
  const top = []
  for await (const entry of listFiles({ repo: 'acme/public', hubUrl })) top.push(entry.path)
  t.same(top, ['adapter_config.json', 'adapter_model.safetensors', 'sub'], 'not recursive: first level only')

  const paths = await pathsInfo({
    repo: 'acme/public',
    hubUrl,
    paths: ['adapter_model.safetensors', 'adapter_model.bin', 'sub'],
    revision: info.sha,
    expand: true,
  })
  t.same(
    paths.map((p) => [p.path, p.type, p.size, p.lfs?.oid]),
    [
      ['adapter_model.safetensors', 'file', WEIGHTS.length, sha256(WEIGHTS)],
      ['sub', 'directory', 0, undefined],
    ],
    'missing paths are left out',
  )
  t.equal(paths[0]!.lastCommit.id, info.sha)
})

t.test('downloads: ranges, ETags, LFS redirects, counters', async (t) => {
  const hub = await startHub(t)
  const hubUrl = hub.url
  const info = await fileDownloadInfo({ repo: 'acme/public', path: 'adapter_model.safetensors', hubUrl })
  t.equal(info?.size, WEIGHTS.length)
  t.equal(info?.etag, `"${sha256(WEIGHTS)}"`, 'the LFS sha256 is the ETag')
  t.equal(hub.downloads('acme/public', 'adapter_model.safetensors'), 0, 'a Range probe is not a download')

  const blob = await downloadFile({ repo: 'acme/public', path: 'adapter_model.safetensors', hubUrl, xet: false })
  t.ok(Buffer.from(await blob!.arrayBuffer()).equals(WEIGHTS))
  t.equal(hub.downloads('acme/public', 'adapter_model.safetensors'), 1)
  const config = await downloadFile({ repo: 'acme/public', path: 'adapter_config.json', hubUrl })
  t.equal(await config!.text(), CONFIG)
  t.equal(await downloadFile({ repo: 'acme/public', path: 'nope.json', hubUrl }), null, 'EntryNotFound → null')
  t.equal(await fileExists({ repo: 'acme/public', path: 'adapter_config.json', hubUrl }), true)
  t.equal(await fileExists({ repo: 'acme/public', path: 'nope.json', hubUrl }), false)

  // The raw protocol, as the Python client sees it.
  const head = await fetch(`${hubUrl}/acme/public/resolve/main/adapter_model.safetensors`, {
    method: 'HEAD',
    redirect: 'manual',
  })
  t.equal(head.status, 302)
  t.equal(head.headers.get('x-linked-etag'), `"${sha256(WEIGHTS)}"`)
  t.equal(head.headers.get('x-linked-size'), String(WEIGHTS.length))
  t.equal(head.headers.get('x-repo-commit'), hub.sha('acme/public'))
  const ranged = await fetch(`${hubUrl}/acme/public/resolve/main/adapter_config.json`, {
    headers: { range: 'bytes=2-5' },
  })
  t.equal(ranged.status, 206)
  t.equal(ranged.headers.get('content-range'), `bytes 2-5/${CONFIG.length}`)
  t.equal(await ranged.text(), CONFIG.slice(2, 6))
  t.equal(ranged.headers.get('etag'), `"${hub.fileInfo('acme/public', 'adapter_config.json').oid}"`)
  const beyond = await fetch(`${hubUrl}/acme/public/resolve/main/adapter_config.json`, {
    headers: { range: `bytes=${CONFIG.length}-` },
  })
  t.equal(beyond.status, 416)
  await beyond.body?.cancel()
  const raw = await fetch(`${hubUrl}/acme/public/raw/main/adapter_model.safetensors`)
  t.match(await raw.text(), `oid sha256:${sha256(WEIGHTS)}`, 'raw/ gives the LFS pointer')
  const forged = await fetch(`${hubUrl}/__lfs/acme/private/${hub.sha('acme/private')}/adapter_model.safetensors?sig=x`)
  t.equal(forged.status, 403, 'the CDN wants a signed URL')
  await forged.body?.cancel()
})

t.test('access control as the real hub answers it', async (t) => {
  const hub = await startHub(t)
  const hubUrl = hub.url
  // Private: 401 anonymous, 404 to a signed-in stranger, 200 with access.
  t.equal(await statusOf(modelInfo({ name: 'acme/private', hubUrl })), 401)
  t.equal(await statusOf(modelInfo({ name: 'acme/private', hubUrl, accessToken: 'hf_stranger' })), 404)
  t.equal(await statusOf(modelInfo({ name: 'acme/private', hubUrl, accessToken: 'hf_reader' })), 'ok')
  t.equal(await statusOf(modelInfo({ name: 'acme/nothing', hubUrl })), 401, 'a missing repo looks private')
  t.equal(await statusOf(modelInfo({ name: 'acme/nothing', hubUrl, accessToken: 'hf_reader' })), 404)
  // An unknown token is refused even for public repos.
  t.equal(await statusOf(modelInfo({ name: 'acme/public', hubUrl, accessToken: 'hf_unknown' })), 401)
  // Gated: metadata is public, files need access.
  t.equal(await statusOf(modelInfo({ name: 'acme/gated', hubUrl })), 'ok')
  const gatedFile = { repo: 'acme/gated', path: 'adapter_config.json', hubUrl }
  t.equal(await statusOf(downloadFile(gatedFile)), 401)
  t.equal(await statusOf(downloadFile({ ...gatedFile, accessToken: 'hf_stranger' })), 403)
  t.equal(await statusOf(downloadFile({ ...gatedFile, accessToken: 'hf_reader' })), 'ok')

  const gated = await fetch(`${hubUrl}/acme/gated/resolve/main/adapter_config.json`, {
    headers: { authorization: 'Bearer hf_stranger' },
  })
  t.equal(gated.headers.get('x-error-code'), 'GatedRepo')
  t.match(await gated.json(), { error: /restricted and you are not in the authorized list/ })
  const missing = await fetch(`${hubUrl}/api/models/acme/nothing`, { headers: { authorization: 'Bearer hf_reader' } })
  t.equal(missing.headers.get('x-error-code'), 'RepoNotFound')
  await missing.body?.cancel()
  const badRev = await fetch(`${hubUrl}/api/models/acme/public/revision/v9`)
  t.equal(badRev.status, 404)
  t.equal(badRev.headers.get('x-error-code'), 'RevisionNotFound')
  await badRev.body?.cancel()

  const me = await whoAmI({ hubUrl, accessToken: 'hf_reader' })
  t.equal(me.name, 'reader')
  hub.revokeToken('hf_reader')
  t.equal(await statusOf(whoAmI({ hubUrl, accessToken: 'hf_reader' })), 401)
  t.equal(await statusOf(modelInfo({ name: 'acme/private', hubUrl, accessToken: 'hf_reader' })), 401, 'revoked')
  t.ok(
    hub.requests.some((r) => r.path === '/api/models/acme/private/revision/HEAD' && r.token === 'hf_reader'),
    'requests are recorded with their token',
  )
})

t.test('snapshotDownload of a private repo, revisions and new commits', async (t) => {
  const hub = await startHub(t)
  const hubUrl = hub.url
  const first = hub.sha('acme/private')
  const second = await hub.pushCommit('acme/private', { ...FILES, 'adapter_config.json': '{"r":4}' })
  hub.tag('acme/private', 'v1', first)
  t.not(first, second)
  t.equal(hub.sha('acme/private'), second, 'main moved')
  const atV1 = await modelInfo({
    name: 'acme/private',
    hubUrl,
    revision: 'v1',
    additionalFields: ['sha'],
    accessToken: 'hf_reader',
  })
  t.equal(atV1.sha, first)
  const atSha = await modelInfo({
    name: 'acme/private',
    hubUrl,
    revision: first,
    additionalFields: ['sha'],
    accessToken: 'hf_reader',
  })
  t.equal(atSha.sha, first)

  const cacheDir = t.testdir()
  // snapshotDownload prints "Downloading …" through console.debug; keep the test output clean.
  const quiet = t.capture(console, 'debug')
  t.teardown(() => quiet.restore())
  const dir = await snapshotDownload({
    repo: 'acme/private',
    hubUrl,
    cacheDir,
    revision: 'v1',
    accessToken: 'hf_reader',
  })
  t.equal(await readFile(join(dir, 'adapter_config.json'), 'utf8'), CONFIG)
  t.ok((await readFile(join(dir, 'adapter_model.safetensors'))).equals(WEIGHTS))
})

t.test('failure injection: 503s, delays, dropped and corrupted deliveries', async (t) => {
  const hub = await startHub(t)
  const url = `${hub.url}/acme/public/resolve/main/adapter_model.safetensors`
  hub.failNext(2, { url: '/api/models/' })
  t.equal((await fetch(`${hub.url}/api/models/acme/public`)).status, 503)
  t.equal((await fetch(`${url}`, { method: 'HEAD' })).status, 200, 'other URLs are not affected')
  t.equal((await fetch(`${hub.url}/api/models/acme/public`)).status, 503)
  t.equal((await fetch(`${hub.url}/api/models/acme/public`)).status, 200, 'only the next 2')

  hub.dropNext(1, { path: 'adapter_model.safetensors', afterBytes: 1000 })
  const dropped = await fetch(url)
  t.equal(dropped.status, 200)
  await t.rejects(dropped.arrayBuffer(), 'the body is cut short')
  t.equal(hub.downloads('acme/public', 'adapter_model.safetensors'), 1, 'a dropped delivery counts')
  const whole = Buffer.from(await (await fetch(url)).arrayBuffer())
  t.ok(whole.equals(WEIGHTS), 'the next one is complete')

  hub.corruptNext(1, { repo: 'acme/public' })
  const corrupt = Buffer.from(await (await fetch(url)).arrayBuffer())
  t.equal(corrupt.length, WEIGHTS.length)
  t.not(sha256(corrupt), sha256(WEIGHTS))

  hub.setDelay(150)
  const started = Date.now()
  await (await fetch(`${hub.url}/api/models/acme/public`)).arrayBuffer()
  t.ok(Date.now() - started >= 140, 'answers are delayed')
  hub.setDelay(0)

  // close() cuts a request still waiting on a delay: no open handles.
  hub.setDelay(60_000)
  const pending = fetch(`${hub.url}/api/models/acme/public`).then(
    () => 'answered',
    () => 'cut',
  )
  await new Promise((resolve) => setTimeout(resolve, 50))
  await hub.close()
  t.equal(await pending, 'cut')
})
