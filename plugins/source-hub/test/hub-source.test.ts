import { createHash } from 'node:crypto'
import { readFile, readdir } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { FakeHub } from '@loom/testkit'
import { ADAPTER, CONFIG, READER, STRANGER, WEIGHTS, context, registerHub, startHub } from './hub-harness.ts'

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex')

t.test('resolves a public adapter to its commit with sizes and LFS sha256, then fetches it', async (t) => {
  const hub = await startHub(t)
  const { source } = await registerHub({ hub_url: hub.url })
  t.equal(source.name, 'hub', 'the default name')
  const resolved = await source.resolve({ source: 'hub', id: 'acme/poet' }, context())
  t.same(resolved, {
    source: 'hub',
    id: 'acme/poet',
    revision: hub.sha('acme/poet'),
    files: [
      { path: 'adapter_config.json', size: CONFIG.length },
      { path: 'adapter_model.safetensors', size: WEIGHTS.length, sha256: sha256(WEIGHTS) },
      { path: 'tokenizer.json', size: ADAPTER['tokenizer.json'].length },
    ],
  })
  t.same(
    hub.requests.map((r) => `${r.method} ${r.path}`),
    ['GET /api/models/acme/poet/revision/HEAD', `POST /api/models/acme/poet/paths-info/${hub.sha('acme/poet')}`],
    'model info, then one paths-info call at the pinned sha',
  )

  const dest = t.testdir()
  await source.fetch(resolved, dest, context())
  t.same((await readdir(dest)).sort(), ['adapter_config.json', 'adapter_model.safetensors', 'tokenizer.json'])
  t.ok((await readFile(join(dest, 'adapter_model.safetensors'))).equals(WEIGHTS))
  t.equal(await readFile(join(dest, 'adapter_config.json'), 'utf8'), CONFIG)
  t.equal(hub.downloads('acme/poet', 'adapter_model.safetensors'), 1)
  t.equal(hub.downloads('acme/poet', 'README.md'), 0, 'files the runtime does not read are not fetched')
  t.ok(
    hub.requests.some((r) => r.path.startsWith(`/acme/poet/resolve/${resolved.revision}/`)),
    'downloads use the pinned sha, not the branch',
  )
})

t.test('@revision pins a branch, tag or sha; sha pins are resolved once', async (t) => {
  const hub = await startHub(t)
  const { source } = await registerHub({ hub_url: hub.url })
  const first = hub.sha('acme/poet')
  hub.tag('acme/poet', 'v1', first)
  const second = await hub.pushCommit('acme/poet', { ...ADAPTER, 'adapter_config.json': '{"r":4}' })
  const revisionOf = async (id: string) => (await source.resolve({ source: 'hub', id }, context())).revision
  t.equal(await revisionOf('acme/poet'), second, 'no revision: the default branch')
  t.equal(await revisionOf('acme/poet@main'), second)
  t.equal(await revisionOf('acme/poet@v1'), first, 'a tag')
  t.equal(await revisionOf(`acme/poet@${first}`), first, 'a sha')
  const pinned = await source.resolve({ source: 'hub', id: `acme/poet@${first}` }, context())
  t.equal(pinned.id, 'acme/poet', 'the id loses its @revision so every spelling shares one cache entry')
  t.same(pinned.files[0], { path: 'adapter_config.json', size: CONFIG.length }, 'files of that commit')

  const before = hub.requests.length
  await revisionOf(`acme/poet@${first}`)
  t.equal(hub.requests.length, before, 'a sha-pinned resolution is remembered')
  await revisionOf('acme/poet')
  t.equal(hub.requests.length, before + 2, "a branch is asked again (its TTL is the core's policy)")

  await t.rejects(source.resolve({ source: 'hub', id: 'acme/poet@v9' }, context()), {
    code: 'adapter_not_found',
    message: 'Adapter `acme/poet@v9` was not found in source `hub`',
  })
})

t.test('concurrent resolutions with one token share one pair of hub calls', async (t) => {
  const hub = await startHub(t)
  hub.setDelay(50)
  const { source } = await registerHub({ hub_url: hub.url })
  const all = await Promise.all(
    Array.from({ length: 20 }, () => source.resolve({ source: 'hub', id: 'acme/secret' }, context(READER))),
  )
  t.ok(all.every((r) => r.revision === hub.sha('acme/secret')))
  t.equal(hub.requests.length, 2)
})

t.test('private, gated and missing repos map to auth and not-found errors', async (t) => {
  const hub = await startHub(t)
  const { source } = await registerHub({ hub_url: hub.url, retries: 0 })
  const resolve = (id: string, token?: string) => source.resolve({ source: 'hub', id }, context(token))

  await t.rejects(resolve('acme/secret'), {
    code: 'auth_missing',
    message:
      'Adapter `acme/secret` requires a token (the repository is private or gated): send `api_token` or `Authorization: Bearer`',
  })
  const secret = await resolve('acme/secret', READER)
  t.equal(secret.revision, hub.sha('acme/secret'), 'a token that can read it')
  const dest = t.testdir()
  await source.fetch(secret, dest, context(READER))
  t.ok((await readFile(join(dest, 'adapter_model.safetensors'))).equals(WEIGHTS))
  await t.rejects(resolve('acme/secret', STRANGER), { code: 'adapter_not_found' }, 'the hub hides it from strangers')
  await t.rejects(resolve('acme/nothing', READER), {
    code: 'adapter_not_found',
    message: 'Adapter `acme/nothing` was not found in source `hub`',
  })
  await t.rejects(resolve('acme/nothing'), { code: 'auth_missing' }, 'anonymous misses look private (hub: 401)')

  // Gated: the listing is public, the files are not.
  const gated = await resolve('acme/gated')
  await t.rejects(source.fetch(gated, t.testdir(), context()), { code: 'auth_missing' })
  await t.rejects(source.fetch(gated, t.testdir(), context(STRANGER)), {
    code: 'auth_forbidden',
    message: 'The token may not read adapter `acme/gated`: the hub refused access to the repository',
  })
  await source.fetch(gated, t.testdir(), context(READER))

  // A token revoked after resolve: the download is refused, not retried.
  hub.revokeToken(READER)
  await t.rejects(source.fetch(secret, t.testdir(), context(READER)), {
    code: 'auth_invalid',
    message: 'The token was refused for adapter `acme/secret`: the hub does not accept the token',
  })
  await t.rejects(resolve('acme/poet', READER), { code: 'auth_invalid' }, 'the hub refuses a revoked token everywhere')
})

t.test('ids are checked before any request', async (t) => {
  const hub = await startHub(t)
  const { source } = await registerHub({ hub_url: hub.url })
  for (const id of [
    'poet',
    'acme/poet/extra',
    '../etc/passwd',
    'acme/po..et',
    'acme/poet@',
    'acme/poet@a..b',
    'acme/p%2Fet',
    'acme/poet?x=1',
    '',
    'acme/-poet',
  ]) {
    await t.rejects(
      source.resolve({ source: 'hub', id }, context()),
      {
        code: 'adapter_id_invalid',
        message: `Invalid adapter id \`${id}\` for source \`hub\`: expected \`owner/name\` or \`owner/name@revision\` (for example acme/my-lora@main)`,
      },
      id,
    )
  }
  t.equal(hub.requests.length, 0)
})

t.test('file choice: safetensors over bin, .bin alone, Medusa, and repos that hold no adapter', async (t) => {
  const hub = await FakeHub.start()
  t.teardown(() => hub.close())
  await hub.addRepo('acme/both', {
    'adapter_config.json': '{}',
    'adapter_model.safetensors': 'st',
    'adapter_model.bin': 'pt',
  })
  await hub.addRepo('acme/bin', { 'adapter_config.json': '{}', 'adapter_model.bin': 'pt' })
  await hub.addRepo('acme/medusa', { 'config.json': '{"medusa_num_heads":2}', 'model.safetensors': 'heads' })
  await hub.addRepo('acme/model', { 'README.md': 'a model, not an adapter', 'model.safetensors': 'w' })
  const { source } = await registerHub({ hub_url: hub.url })
  const paths = async (id: string) => (await source.resolve({ source: 'hub', id }, context())).files.map((f) => f.path)
  t.same(await paths('acme/both'), ['adapter_config.json', 'adapter_model.safetensors'])
  t.same(await paths('acme/bin'), ['adapter_config.json', 'adapter_model.bin'])
  t.same(await paths('acme/medusa'), ['config.json', 'model.safetensors'])
  await t.rejects(source.resolve({ source: 'hub', id: 'acme/model' }, context()), {
    code: 'adapter_invalid',
    message:
      /^Adapter `acme\/model` cannot be used with this model: the repository \(commit [0-9a-f]{12}\) has neither adapter_config.json \(LoRA\) nor config.json \(Medusa\)$/,
  })
})

t.test('transient failures are retried with backoff; lasting ones are reported', async (t) => {
  const hub = await startHub(t)
  const lines: string[] = []
  const { source } = await registerHub({ hub_url: hub.url, retries: 2 })
  hub.failNext(1, { url: '/api/models/acme/poet/revision/' })
  const resolved = await source.resolve({ source: 'hub', id: 'acme/poet' }, context(READER, undefined, lines))
  t.equal(hub.requests[0]!.status, 503)
  t.equal(hub.requests[1]!.status, 200, 'the model info call was retried')
  t.match(lines.join('\n'), /retrying model info/)

  // A download cut halfway, then a damaged one: both retried, the third delivery is used.
  hub.dropNext(1, { path: 'adapter_model.safetensors' })
  hub.corruptNext(1, { path: 'adapter_model.safetensors' })
  const dest = t.testdir()
  await source.fetch(resolved, dest, context(READER, undefined, lines))
  t.ok((await readFile(join(dest, 'adapter_model.safetensors'))).equals(WEIGHTS))
  t.equal(hub.downloads('acme/poet', 'adapter_model.safetensors'), 3)
  t.match(lines.join('\n'), /retrying download.*terminated.*after \d+ bytes/)
  t.match(lines.join('\n'), /retrying download.*has sha256 [0-9a-f]{64}, the hub listed/)

  hub.dropNext(3, { path: 'adapter_model.safetensors', afterBytes: 1000 })
  await t.rejects(source.fetch(resolved, t.testdir(), context()), {
    code: 'adapter_download_failed',
    message:
      /^Downloading adapter `acme\/poet` from `hub` failed: GET adapter_model.safetensors: terminated \(.*\) after 1000 bytes$/,
  })

  const other = await registerHub({ hub_url: hub.url, retries: 0 })
  hub.failNext(1, { status: 500 })
  await t.rejects(other.source.resolve({ source: 'hub', id: 'acme/poet' }, context()), {
    code: 'adapter_source_unavailable',
    message:
      'Adapter source `hub` could not be reached for `acme/poet`: model info of acme/poet@HEAD: the hub answered HTTP 500',
  })
  const lines2 = lines.join('\n')
  t.notMatch(lines2, READER, 'no token in any log line')
})

t.test('timeouts, an unreachable hub, and cancellation', async (t) => {
  const hub = await startHub(t)
  const { source } = await registerHub({ hub_url: hub.url, retries: 0, timeout_ms: 100 })
  hub.setDelay(400)
  await t.rejects(source.resolve({ source: 'hub', id: 'acme/poet' }, context()), {
    code: 'adapter_source_unavailable',
    message: /model info of acme\/poet@HEAD: no answer within 100 ms/,
  })
  hub.setDelay(0)
  const resolved = await source.resolve({ source: 'hub', id: 'acme/poet' }, context())

  // Cancelling a resolve or a fetch surfaces the caller's own reason.
  hub.setDelay(60)
  const cancel = new AbortController()
  const pending = source.fetch(resolved, t.testdir(), context(undefined, cancel.signal))
  setTimeout(() => cancel.abort(new Error('client went away')), 20)
  await t.rejects(pending, { message: 'client went away' })
  const cancel2 = new AbortController()
  const resolving = source.resolve({ source: 'hub', id: 'acme/poet' }, context(undefined, cancel2.signal))
  cancel2.abort(new Error('client went away'))
  await t.rejects(resolving, { message: 'client went away' })
  hub.setDelay(0)

  const gone = await FakeHub.start()
  const url = gone.url
  await gone.close()
  const offline = await registerHub({ hub_url: url, retries: 1 })
  await t.rejects(offline.source.resolve({ source: 'hub', id: 'acme/poet' }, context(READER)), {
    code: 'adapter_source_unavailable',
    message:
      /^Adapter source `hub` could not be reached for `acme\/poet`: model info of acme\/poet@HEAD: fetch failed \(ECONNREFUSED\)$/,
  })
})

t.test('the global token is used only when enabled and the request has none', async (t) => {
  const hub = await startHub(t)
  const off = await registerHub({ hub_url: hub.url }, { HF_TOKEN: READER })
  await t.rejects(off.source.resolve({ source: 'hub', id: 'acme/secret' }, context()), { code: 'auth_missing' })

  const switches: Record<string, string>[] = [{ LORAX_USE_GLOBAL_HF_TOKEN: '1' }, { LOOM_USE_GLOBAL_HF_TOKEN: 'true' }]
  for (const env of switches) {
    const on = await registerHub({ hub_url: hub.url }, { ...env, HUGGING_FACE_HUB_TOKEN: READER })
    await on.source.resolve({ source: 'hub', id: 'acme/secret' }, context())
    t.equal(hub.requests.at(-1)!.token, READER, `${Object.keys(env)[0]}: the server's token was sent`)
    t.match(on.logs.join('\n'), /global hub token fallback is on: callers without a token can use every adapter/)
    t.notMatch(on.logs.join('\n'), READER)
  }
  const byOption = await registerHub({ hub_url: hub.url, use_global_token: true }, { HF_TOKEN: READER })
  await byOption.source.resolve({ source: 'hub', id: 'acme/poet' }, context(STRANGER))
  t.equal(hub.requests.at(-1)!.token, STRANGER, "the request's own token wins")

  const noToken = await registerHub({ hub_url: hub.url, use_global_token: true })
  t.match(noToken.logs.join('\n'), /no server token is set/)
})

t.test('options are checked by the schema', async (t) => {
  const plugin = (await import('../src/index.ts')).default
  t.same(plugin.options.parse(undefined), {
    hub_url: 'https://huggingface.co',
    name: 'hub',
    use_global_token: false,
    timeout_ms: 30_000,
    retries: 3,
  })
  t.throws(() => plugin.options.parse({ hub_url: 'ftp://x' }))
  t.throws(() => plugin.options.parse({ hubUrl: 'https://x' }), 'unknown keys are refused')
  t.throws(() => plugin.options.parse({ retries: -1 }))
})
