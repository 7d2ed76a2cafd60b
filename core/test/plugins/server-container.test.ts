import 'reflect-metadata'
import path from 'node:path'
import t, { type Test } from 'tap'
import { container as globalContainer } from 'tsyringe'
import { AdapterSource, AuthChecker, StepRunner, TemplateEngine } from '../../src/contracts/index.ts'
import { loadConfig } from '../../src/config/index.ts'
import { createServerContainer, ServerConfig, type ServerContainerOptions } from '../../src/container/index.ts'
import { FIXTURE_PLUGINS } from './fixture-plugins.ts'
import { RecordingLogger } from './recording-logger.ts'

async function build(t: Test, plugins: string, options: ServerContainerOptions = {}) {
  const dir = t.testdir({
    ...FIXTURE_PLUGINS,
    'loom.yaml': `model:\n  id: tiny\n  path: ./models/tiny\nplugins:\n${plugins}`,
  })
  const config = await loadConfig(path.join(dir, 'loom.yaml'), { env: {}, cwd: dir })
  const logger = new RecordingLogger()
  const server = await createServerContainer(config, logger, { cwd: dir, ...options })
  t.teardown(() => server.dispose())
  return { server, logger, config }
}

const PLUGINS = [
  '  - use: ./runtime.ts',
  '  - use: ./source.ts',
  '    options: { name: files }',
  '  - use: ./source.ts',
  '    options: { name: archive }',
  '  - use: ./checker.ts',
  '    options: { source: archive }',
  '',
].join('\n')

t.test('providers are registered in a child container and exposed by key', async (t) => {
  const { server, config } = await build(t, PLUGINS)
  t.same([...server.adapterSources().keys()], ['files', 'archive'])
  t.same([...server.authCheckers().keys()], ['archive'])
  t.same(server.backendOrRunner(), { kind: 'step-runner', runner: { fixture: 'runner' } })

  const sources = server.container.resolveAll<AdapterSource>(AdapterSource)
  t.same(
    sources.map((s) => s.name),
    ['files', 'archive'],
    'multi-providers: one registration each, resolveAll in plugin order',
  )
  t.equal(server.container.resolveAll<AuthChecker>(AuthChecker).length, 1)
  t.same(server.container.resolve(StepRunner), { fixture: 'runner' })
  t.equal(server.container.resolve(ServerConfig), config)
  t.notOk(globalContainer.isRegistered(AdapterSource), 'the global container stays empty')
  t.notOk(globalContainer.isRegistered(StepRunner))
})

t.test('dispose runs close hooks in reverse order, closes sources, and is idempotent', async (t) => {
  const { server, logger } = await build(t, PLUGINS)
  const first = server.dispose()
  t.equal(server.dispose(), first, 'a second call returns the same promise')
  await first
  await server.dispose()
  t.same(logger.events(), [
    'close-hook:archive',
    'close-hook:files',
    'close-hook:runtime',
    'source-close:archive',
    'source-close:files',
  ])
  t.throws(() => server.container.resolve(StepRunner), /disposed/, 'the container refuses use after dispose')
})

t.test('a core default fills a gap, and a plugin-provided implementation wins over it', async (t) => {
  const built: string[] = []
  const defaults = {
    TemplateEngine: () => {
      built.push('TemplateEngine')
      return { compile: () => ({ render: () => 'from core' }) }
    },
  }
  const plain = await build(t, '  - use: ./runtime.ts\n', { defaults })
  t.equal(
    plain.server.container
      .resolve<TemplateEngine>(TemplateEngine)
      .compile('', 'x')
      .render({} as never),
    'from core',
  )

  const overridden = await build(t, '  - use: ./runtime.ts\n  - use: ./template.ts\n', { defaults })
  t.equal(
    overridden.server.container
      .resolve<TemplateEngine>(TemplateEngine)
      .compile('', 'x')
      .render({} as never),
    'from plugin',
  )
  t.same(built, ['TemplateEngine'], 'the overridden default is never built')
  t.equal(overridden.server.container.resolveAll(TemplateEngine).length, 1)
})

t.test('an AuthChecker for a source nobody provides is a warning, not an error', async (t) => {
  const { logger } = await build(t, '  - use: ./runtime.ts\n  - use: ./checker.ts\n    options: { source: ghost }\n')
  t.match(
    logger.entries.filter((e) => e.level === 'warn'),
    [{ obj: { source: 'ghost' }, msg: 'an AuthChecker guards an adapter_source no plugin provides' }],
  )
})

t.test('plugins receive server facts and a child logger named after them', async (t) => {
  const { logger, config } = await build(t, '  - use: ./runtime.ts\n')
  const entry = logger.entries.find((e) => e.msg === 'registered')
  t.same(entry?.obj, {
    plugin: 'fixture-runtime',
    facts: {
      modelPath: path.join(config.dir, 'models/tiny'),
      modelId: 'tiny',
      cacheDir: path.join(config.dir, '.loom-cache/adapters'),
      configDir: config.dir,
      limits: {
        max_batch_size: 32,
        max_batch_prefill_tokens: 4096,
        max_concurrent_requests: 128,
        max_stop_sequences: 4,
      },
    },
  })
})
