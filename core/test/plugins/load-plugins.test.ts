import path from 'node:path'
import t, { type Test } from 'tap'
import { loadConfig } from '../../src/config/index.ts'
import { LoomError } from '../../src/errors/index.ts'
import { loadPlugins, resolvePlugin } from '../../src/plugins/index.ts'
import { FIXTURE_PLUGINS } from './fixture-plugins.ts'
import { RecordingLogger } from './recording-logger.ts'

/** A configuration whose `plugins:` list is `plugins` (YAML lines), in a directory holding the fixtures. */
function configText(plugins: string): string {
  return `model:\n  id: tiny\n  path: ./models/tiny\nplugins:\n${plugins}`
}

async function load(t: Test, plugins: string, logger = new RecordingLogger()) {
  const dir = t.testdir({ ...FIXTURE_PLUGINS, 'loom.yaml': configText(plugins) })
  const config = await loadConfig(path.join(dir, 'loom.yaml'), { env: {}, cwd: dir })
  return { dir, set: await loadPlugins(config, logger, { cwd: dir }), logger }
}

/** Assert that loading fails with exactly `code` and `message` (a function of the test dir for absolute paths). */
async function rejects(
  t: Test,
  plugins: string,
  code: string,
  message: string | ((dir: string) => string),
  env: Record<string, string> = {},
) {
  const dir = t.testdir({ ...FIXTURE_PLUGINS, 'loom.yaml': configText(plugins) })
  const config = await loadConfig(path.join(dir, 'loom.yaml'), { env, cwd: dir })
  const err = await loadPlugins(config, new RecordingLogger(), { cwd: dir }).then(
    () => t.fail('expected the plugins to be refused'),
    (e: unknown) => e,
  )
  t.ok(err instanceof LoomError, 'a LoomError')
  t.equal((err as LoomError).code, code)
  t.equal((err as Error).message, typeof message === 'string' ? message : message(dir))
}

const RUNTIME = '  - use: ./runtime.ts\n'

t.test('bad plugin entries fail at start with the file, the key and the plugin', async (t) => {
  t.test('unknown plugin package', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: acme-loom-source\n`,
      'plugin_not_found',
      'loom.yaml: `plugins[1].use` names plugin `acme-loom-source`, which cannot be found: no installed package has that name (install it, or write a path starting with `./` relative to the configuration file)',
    ),
  )
  t.test('plugin path that does not exist', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./plugins/acme\n`,
      'plugin_not_found',
      (dir) =>
        `loom.yaml: \`plugins[1].use\` names plugin \`./plugins/acme\`, which cannot be found: nothing exists at ${dir}/plugins/acme`,
    ),
  )
  t.test('directory without an entry point', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./empty-dir\n`,
      'plugin_not_found',
      (dir) =>
        `loom.yaml: \`plugins[1].use\` names plugin \`./empty-dir\`, which cannot be found: ${dir}/empty-dir has no package.json \`exports\` or \`main\`, and no src/index.ts, index.ts or index.js`,
    ),
  )
  t.test('module without a default export', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./no-default.ts\n`,
      'plugin_invalid',
      'loom.yaml: `plugins[1].use` plugin `./no-default.ts` is not a Loom plugin: it has no default export (write `export default definePlugin({ ... })`)',
    ),
  )
  t.test('metadata naming an unknown contract', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./bad-provides.ts\n`,
      'plugin_invalid',
      'loom.yaml: `plugins[1].use` plugin `./bad-provides.ts` is not a Loom plugin: `provides` must be a non-empty list of AdapterSource, AuthChecker, Backend, StepRunner, TemplateEngine, TokenizerLoader; found ["Database"]',
    ),
  )
  t.test('options that are not a zod schema', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./no-schema.ts\n`,
      'plugin_invalid',
      "loom.yaml: `plugins[1].use` plugin `./no-schema.ts` is not a Loom plugin: `options` must be a zod schema (use `z` from '@loom/core'); found an object",
    ),
  )
  t.test('module that does not compile', async (t) => {
    const dir = t.testdir({ ...FIXTURE_PLUGINS, 'loom.yaml': configText(`${RUNTIME}  - use: ./syntax-error.ts\n`) })
    const config = await loadConfig(path.join(dir, 'loom.yaml'), { env: {}, cwd: dir })
    await t.rejects(loadPlugins(config, new RecordingLogger(), { cwd: dir }), {
      code: 'plugin_invalid',
      message: new RegExp(
        `^loom\\.yaml: \`plugins\\[1\\]\\.use\` plugin \`\\./syntax-error\\.ts\` is not a Loom plugin: importing ${dir}/syntax-error\\.ts failed: `,
      ),
    })
  })
  t.test('options failing the plugin schema: wrong type', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./source.ts\n    options:\n      name: 7\n`,
      'plugin_options_invalid',
      'loom.yaml: `plugins[1].options.name` (plugin fixture-source) must be a string; found 7',
    ),
  )
  t.test('options failing the plugin schema: typo', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./source.ts\n    options:\n      name: files\n      retires: 3\n`,
      'plugin_options_invalid',
      'loom.yaml: `plugins[1].options.retires` (plugin fixture-source) is not a known key (did you mean `retries`?); found 3',
    ),
  )
  t.test('a misspelt required key names the unknown key and what it probably meant', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./source.ts\n    options:\n      nmae: files\n`,
      'plugin_options_invalid',
      'loom.yaml: `plugins[1].options.nmae` (plugin fixture-source) is not a known key (did you mean `name`?); found "files"',
    ),
  )
  t.test('options missing altogether: read as {}, so the missing required key is named', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./source.ts\n`,
      'plugin_options_invalid',
      'loom.yaml: `plugins[1].options.name` (plugin fixture-source) is required; found nothing',
    ),
  )
  t.test('option values from the environment are named, never echoed', async (t) => {
    const env = { RETRIES: 'hunter2', TOKEN: 'sk-secret' }
    await rejects(
      t,
      `${RUNTIME}  - use: ./source.ts\n    options:\n      name: files\n      retries: "\${RETRIES}"\n`,
      'plugin_options_invalid',
      'loom.yaml: `plugins[1].options.retries` (plugin fixture-source) must be a number; found the value of ${RETRIES}',
      env,
    )
    await rejects(
      t,
      `${RUNTIME}  - use: ./source.ts\n    options:\n      name: files\n      auth:\n        token: Bearer \${TOKEN}\n`,
      'plugin_options_invalid',
      'loom.yaml: `plugins[1].options.auth` (plugin fixture-source) is not a known key (known keys: `name`, `retries`); found a value that uses ${TOKEN}',
      env,
    )
  })
  t.test('duplicate adapter_source name', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./source.ts\n    options: { name: files }\n  - use: ./source.ts\n    options: { name: files }\n`,
      'source_name_conflict',
      'Two plugins provide adapter_source `files`: fixture-source (plugins[1]) and fixture-source (plugins[2])',
    ),
  )
  t.test('two AuthCheckers for one source', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./checker.ts\n    options: { source: hub }\n  - use: ./checker.ts\n    options: { source: hub }\n`,
      'contract_conflict',
      'Both fixture-checker (plugins[1]) and fixture-checker (plugins[2]) provide the AuthChecker of adapter_source `hub`; only one may',
    ),
  )
  t.test('a Backend and a StepRunner', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./backend.ts\n`,
      'contract_conflict',
      'Both fixture-runtime (plugins[0]) and fixture-backend (plugins[1]) provide the model runtime (a Backend or a StepRunner); only one may',
    ),
  )
  t.test('two TemplateEngines', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./template.ts\n  - use: ./template.ts\n`,
      'contract_conflict',
      'Both fixture-template (plugins[1]) and fixture-template (plugins[2]) provide TemplateEngine; only one may',
    ),
  )
  t.test('no backend provided', (t) =>
    rejects(
      t,
      '  - use: ./source.ts\n    options: { name: files }\n',
      'contract_missing',
      'No plugin provides a Backend or StepRunner; add one to `plugins:` (for example `@loom/backend-cuda-native`)',
    ),
  )
  t.test('register throws', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./throws.ts\n`,
      'plugin_register_failed',
      'Plugin fixture-throws (plugins[1]) failed to register: cannot open /var/lib/acme: permission denied',
    ),
  )
  t.test('provides something it did not declare', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./undeclared.ts\n`,
      'plugin_contract_mismatch',
      'Plugin fixture-undeclared (plugins[1]) provides Backend, which is not declared in its `provides` list',
    ),
  )
  t.test('declares something it did not provide', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./lazy.ts\n`,
      'plugin_contract_mismatch',
      'Plugin fixture-lazy (plugins[1]) declares AuthChecker in `provides` but register() did not provide one',
    ),
  )
  t.test('provides under a symbol that is not a core token', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./foreign-token.ts\n`,
      'plugin_contract_mismatch',
      'Plugin fixture-foreign (plugins[1]) provided Symbol(AdapterSource), which is not a contract token exported by @loom/core',
    ),
  )
  t.test('an AdapterSource without a name', (t) =>
    rejects(
      t,
      `${RUNTIME}  - use: ./nameless-source.ts\n`,
      'plugin_contract_mismatch',
      'Plugin fixture-nameless (plugins[1]) provided an AdapterSource without a non-empty string `name`',
    ),
  )
})

t.test('a failure releases what earlier plugins set up', async (t) => {
  const logger = new RecordingLogger()
  const dir = t.testdir({
    ...FIXTURE_PLUGINS,
    'loom.yaml': configText(
      `${RUNTIME}  - use: ./source.ts\n    options: { name: a }\n  - use: ./source.ts\n    options: { name: b }\n  - use: ./throws.ts\n`,
    ),
  })
  const config = await loadConfig(path.join(dir, 'loom.yaml'), { env: {}, cwd: dir })
  await t.rejects(loadPlugins(config, logger, { cwd: dir }), { code: 'plugin_register_failed' })
  t.same(logger.events(), ['close-hook:b', 'close-hook:a', 'close-hook:runtime', 'source-close:b', 'source-close:a'])
})

t.test('plugins load by relative file, package folder, and in order', async (t) => {
  const { set } = await load(
    t,
    `${RUNTIME}  - use: ./acme-plugin\n  - use: ./source.ts\n    options: { name: files }\n`,
  )
  t.same(
    set.plugins.map((p) => [p.name, p.label]),
    [
      ['fixture-runtime', 'fixture-runtime (plugins[0])'],
      ['acme-plugin', 'acme-plugin (plugins[1])'],
      ['fixture-source', 'fixture-source (plugins[2])'],
    ],
  )
  t.match(set.plugins[1]?.file, /acme-plugin\/lib\/entry\.ts$/)
  t.same(
    set.provisions.map((p) => p.contract),
    ['StepRunner', 'AdapterSource', 'AdapterSource'],
  )
})

t.test('package names resolve from the config directory, then from @loom/core', async (t) => {
  const dir = t.testdir({})
  const workspace = resolvePlugin('@loom/source-local', dir)
  t.ok(workspace.ok)
  if (workspace.ok) t.match(workspace.file, /plugins\/source-local\/src\/index\.ts$/)
  const core = resolvePlugin('@loom/core', dir)
  t.ok(core.ok)
  if (core.ok) t.match(core.file, /core\/src\/index\.ts$/)
  t.same(resolvePlugin('/definitely/not/here', dir), { ok: false, reason: 'nothing exists at /definitely/not/here' })
})
