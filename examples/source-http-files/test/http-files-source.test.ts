import 'reflect-metadata'
import { createHash, randomBytes } from 'node:crypto'
import { readFile, readdir } from 'node:fs/promises'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import type { AdapterSource, Logger, SourceContext } from '@loom/core'
import { loadConfig } from '../../../core/src/config/index.ts'
import { createServerContainer } from '../../../core/src/container/index.ts'

const PLUGIN_DIR = fileURLToPath(new URL('..', import.meta.url))

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {}, child: () => silent }

/** A StepRunner stand-in so the configuration passes the "model runtime present" check. */
const RUNTIME_PLUGIN = `
import { definePlugin, StepRunner, z } from '@loom/core'
export default definePlugin({
  name: 'test-runtime',
  provides: ['StepRunner'],
  options: z.unknown(),
  register(ctx) { ctx.provide(StepRunner, {}) },
})
`

const WEIGHTS = randomBytes(64 * 1024 + 7)
const ADAPTER_FILES: Record<string, Buffer> = {
  'adapter_config.json': Buffer.from(JSON.stringify({ peft_type: 'LORA', r: 8, lora_alpha: 16 })),
  'adapter_model.safetensors': WEIGHTS,
  'tokenizer.json': Buffer.from('{"model":{}}'),
}

/** A static file server for `root`, with ETag and Content-Length like nginx; records each request. */
async function startFileServer(root: Record<string, Buffer>, log: string[]): Promise<Server> {
  const server = createServer((req, res) => {
    log.push(`${req.method} ${req.url}`)
    const body = root[decodeURIComponent(req.url ?? '')]
    if (body === undefined) {
      res.writeHead(404).end()
      return
    }
    const etag = `"${createHash('sha1').update(body).digest('hex')}"`
    res.writeHead(200, { 'content-length': body.length, etag, 'content-type': 'application/octet-stream' })
    res.end(req.method === 'HEAD' ? undefined : body)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return server
}

function stopServer(server: Server): Promise<void> {
  server.closeAllConnections()
  return new Promise((resolve) => server.close(() => resolve()))
}

function context(signal = new AbortController().signal): SourceContext {
  return { signal, logger: silent }
}

t.test('loaded by path from YAML, resolves and fetches over real HTTP', async (t) => {
  const served: Record<string, Buffer> = {}
  for (const [name, body] of Object.entries(ADAPTER_FILES)) served[`/adapters/acme/tiny-lora/${name}`] = body
  const requests: string[] = []
  const server = await startFileServer(served, requests)
  t.teardown(() => stopServer(server))
  const { port } = server.address() as AddressInfo

  const dir = t.testdir({
    'runtime.ts': RUNTIME_PLUGIN,
    'loom.yaml': [
      'model:',
      '  id: tiny',
      '  path: ./models/tiny',
      'plugins:',
      '  - use: ./runtime.ts',
      // The plugin folder, by a path relative to this configuration file, as third parties load it.
      `  - use: ${path.relative(t.testdirName, PLUGIN_DIR)}`,
      '    options:',
      '      base_url: ${FILES_URL}',
      '      name: team-files',
      '',
    ].join('\n'),
  })
  const config = await loadConfig(path.join(dir, 'loom.yaml'), {
    env: { FILES_URL: `http://127.0.0.1:${port}/adapters` },
    cwd: dir,
  })
  const server_ = await createServerContainer(config, silent, { cwd: dir })
  t.teardown(() => server_.dispose())

  const source = server_.adapterSources().get('team-files') as AdapterSource
  t.ok(source, 'the source is registered under its configured name')

  const resolved = await source.resolve({ source: 'team-files', id: 'acme/tiny-lora' }, context())
  t.same(resolved.files, [
    { path: 'adapter_config.json', size: ADAPTER_FILES['adapter_config.json']!.length },
    { path: 'adapter_model.safetensors', size: WEIGHTS.length },
    { path: 'tokenizer.json', size: ADAPTER_FILES['tokenizer.json']!.length },
  ])
  t.match(resolved.revision, /^[0-9a-f]{32}$/)
  t.equal(resolved.source, 'team-files')
  t.equal(resolved.localDir, undefined)
  t.ok(
    requests.every((r) => r.startsWith('HEAD ')),
    'resolve only sends HEAD requests',
  )

  const again = await source.resolve({ source: 'team-files', id: 'acme/tiny-lora' }, context())
  t.equal(again.revision, resolved.revision, 'same content, same revision')

  const dest = t.testdir({})
  await source.fetch(resolved, dest, context())
  t.same((await readdir(dest)).sort(), Object.keys(ADAPTER_FILES).sort())
  for (const [name, body] of Object.entries(ADAPTER_FILES)) {
    t.ok((await readFile(path.join(dest, name))).equals(body), `${name} has the served bytes`)
  }

  served['/adapters/acme/tiny-lora/adapter_model.safetensors'] = Buffer.concat([WEIGHTS, Buffer.from('x')])
  const changed = await source.resolve({ source: 'team-files', id: 'acme/tiny-lora' }, context())
  t.not(changed.revision, resolved.revision, 'a changed file gives a new revision')

  await t.rejects(source.resolve({ source: 'team-files', id: 'acme/missing' }, context()), {
    code: 'adapter_not_found',
    message: 'Adapter `acme/missing` was not found in source `team-files`',
  })
  await t.rejects(source.resolve({ source: 'team-files', id: '../secrets' }, context()), {
    code: 'adapter_id_invalid',
    message:
      'Invalid adapter id `../secrets` for source `team-files`: expected a path of letters, digits, `.`, `_` and `-` segments separated by `/` (for example acme/my-lora)',
  })

  const cancelled = new AbortController()
  cancelled.abort(new Error('request cancelled'))
  await t.rejects(source.fetch(resolved, t.testdir({}), context(cancelled.signal)), /request cancelled/)

  await t.rejects(source.fetch(resolved, t.testdir({}), context()), {
    code: 'adapter_download_failed',
    message: `Downloading adapter \`acme/tiny-lora\` from \`team-files\` failed: adapter_model.safetensors has ${WEIGHTS.length + 1} bytes, expected ${WEIGHTS.length}`,
  })

  delete served['/adapters/acme/tiny-lora/tokenizer.json']
  await t.rejects(source.fetch(changed, t.testdir({}), context()), {
    code: 'adapter_download_failed',
    message: 'Downloading adapter `acme/tiny-lora` from `team-files` failed: tokenizer.json answered HTTP 404',
  })
})

t.test('an unreachable server is adapter_source_unavailable', async (t) => {
  const server = await startFileServer({}, [])
  const { port } = server.address() as AddressInfo
  await stopServer(server)
  const plugin = (await import('../src/index.ts')).default
  const provided: AdapterSource[] = []
  await plugin.register(
    {
      server: { modelPath: '/m', modelId: 'm', cacheDir: '/c', configDir: '/', limits: {} },
      logger: silent,
      provide: (_token, impl) => void provided.push(impl as AdapterSource),
      onClose: () => {},
    },
    plugin.options.parse({ base_url: `http://127.0.0.1:${port}/` }),
  )
  const source = provided[0]!
  t.equal(source.name, 'http-files', 'the default name')
  await t.rejects(source.resolve({ source: 'http-files', id: 'acme/x' }, context()), {
    code: 'adapter_source_unavailable',
    message: /^Adapter source `http-files` could not be reached for `acme\/x`: HEAD .*: fetch failed \(ECONNREFUSED\)$/,
  })
})

t.test('options are checked by the loader with the plugin schema', async (t) => {
  const dir = t.testdir({
    'runtime.ts': RUNTIME_PLUGIN,
    'loom.yaml': `model:\n  id: tiny\n  path: m\nplugins:\n  - use: ./runtime.ts\n  - use: ${path.relative(t.testdirName, PLUGIN_DIR)}\n    options:\n      base_url: ftp://files.example/adapters\n`,
  })
  const config = await loadConfig(path.join(dir, 'loom.yaml'), { env: {}, cwd: dir })
  await t.rejects(createServerContainer(config, silent, { cwd: dir }), {
    code: 'plugin_options_invalid',
    message:
      'loom.yaml: `plugins[1].options.base_url` (plugin @loom-example/source-http-files) must be a valid URL; found "ftp://files.example/adapters"',
  })
})
