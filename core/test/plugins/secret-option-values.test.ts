import path from 'node:path'
import t, { type Test } from 'tap'
import { formatStartupError, loadConfig } from '../../src/config/index.ts'
import { LoomError } from '../../src/errors/index.ts'
import { loadPlugins } from '../../src/plugins/index.ts'
import { FIXTURE_PLUGINS } from './fixture-plugins.ts'
import { RecordingLogger } from './recording-logger.ts'

/**
 * Plugin options hold tokens, passwords and URLs with credentials. A startup error about them
 * names the key and what was expected, and shows the value only when it cannot be a secret.
 */

const RUNTIME = '  - use: ./runtime.ts\n'

/** A fixture plugin whose options have secret keys of several shapes, and whose register() echoes its token. */
const SECRETS_PLUGIN = `
import { AdapterSource, definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-secrets',
  provides: ['AdapterSource'],
  options: z.strictObject({
    name: z.string().default('secrets'),
    use_global_token: z.boolean().default(false),
    credentials: z.strictObject({ key_id: z.string(), secret: z.string() }).optional(),
    headers: z.record(z.string(), z.string()).optional(),
    api_token: z.string().optional(),
  }),
  register(ctx, options) {
    if (options.api_token !== undefined) throw new Error('the gateway refused ' + options.api_token)
    ctx.provide(AdapterSource, { name: options.name, async resolve() { throw new Error('unused') }, async fetch() {} })
  },
})
`

/** Load a configuration whose `plugins:` list is `plugins` and return the printed startup error. */
async function printed(t: Test, plugins: string, env: Record<string, string> = {}): Promise<string> {
  const dir = t.testdir({
    ...FIXTURE_PLUGINS,
    'secrets.ts': SECRETS_PLUGIN,
    'loom.yaml': `model:\n  id: tiny\n  path: ./models/tiny\nplugins:\n${RUNTIME}${plugins}`,
  })
  const err = await loadConfig(path.join(dir, 'loom.yaml'), { env, cwd: dir })
    .then((config) => loadPlugins(config, new RecordingLogger(), { cwd: dir }))
    .then(
      () => t.fail('expected the plugins to be refused'),
      (e: unknown) => e,
    )
  t.ok(err instanceof LoomError, 'a LoomError')
  return formatStartupError(err)
}

async function prints(t: Test, plugins: string, expected: string, env: Record<string, string> = {}) {
  const line = await printed(t, plugins, env)
  t.equal(line, expected)
  t.notMatch(line, /QA-CFG-SECRET/, 'the secret is not printed')
}

t.test('the hosted source: a token of the wrong type, and a misspelt token key', async (t) => {
  await prints(
    t,
    `  - use: '@loom/source-hosted'\n    options:\n      token: ["QA-CFG-SECRET-111"]\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.token` (plugin @loom/source-hosted) must be a string; found (value not shown)',
  )
  await prints(
    t,
    `  - use: '@loom/source-hosted'\n    options:\n      tokn: "QA-CFG-SECRET-222"\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.tokn` (plugin @loom/source-hosted) is not a known key (did you mean `token`?); found (value not shown)',
  )
})

t.test('the hub source: a bad hub_url is shown without its userinfo', (t) =>
  prints(
    t,
    `  - use: '@loom/source-hub'\n    options:\n      hub_url: "xttp://qauser:QA-CFG-SECRET-444@hub.example"\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.hub_url` (plugin @loom/source-hub) must be a valid URL; found "xttp://[Redacted]@hub.example"',
  ),
)

t.test('secret keys of every shape', async (t) => {
  const plugin = '  - use: ./secrets.ts\n    options:\n'
  await prints(
    t,
    `${plugin}      credentials: { key_id: AKIA, secret: 42, extra: QA-CFG-SECRET-1 }\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.credentials.secret` (plugin fixture-secrets) must be a string; found (value not shown)',
  )
  await prints(
    t,
    `${plugin}      credentials: QA-CFG-SECRET-2\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.credentials` (plugin fixture-secrets) must be a mapping; found (value not shown)',
  )
  await prints(
    t,
    `${plugin}      headers: { Authorization: [QA-CFG-SECRET-3] }\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.headers.Authorization` (plugin fixture-secrets) must be a string; found (value not shown)',
  )
  await prints(
    t,
    `${plugin}      use_global_token: QA-CFG-SECRET-4\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.use_global_token` (plugin fixture-secrets) must be true or false; found (value not shown)',
  )
  await prints(
    t,
    `${plugin}      api_tokn: QA-CFG-SECRET-5\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.api_tokn` (plugin fixture-secrets) is not a known key (did you mean `api_token`?); found (value not shown)',
  )
  await prints(
    t,
    `${plugin}      header: { X-Api-Key: QA-CFG-SECRET-6 }\n`,
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.header` (plugin fixture-secrets) is not a known key (did you mean `headers`?); found (value not shown)',
  )
})

t.test('ordinary option values are still shown', (t) =>
  prints(
    t,
    '  - use: ./secrets.ts\n    options:\n      nmae: files\n',
    '[plugin_options_invalid] loom.yaml: `plugins[1].options.nmae` (plugin fixture-secrets) is not a known key (did you mean `name`?); found "files"',
  ),
)

t.test('a plugin that echoes a secret option in its register() error', async (t) => {
  await prints(
    t,
    '  - use: ./secrets.ts\n    options:\n      api_token: QA-CFG-SECRET-7\n',
    '[plugin_register_failed] Plugin fixture-secrets (plugins[1]) failed to register: the gateway refused (value not shown)',
  )
  await prints(
    t,
    '  - use: ./secrets.ts\n    options:\n      api_token: ${GATEWAY_TOKEN}\n',
    '[plugin_register_failed] Plugin fixture-secrets (plugins[1]) failed to register: the gateway refused (value not shown)',
    { GATEWAY_TOKEN: 'QA-CFG-SECRET-8' },
  )
})
