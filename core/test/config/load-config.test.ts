import path from 'node:path'
import t, { type Test } from 'tap'
import { chooseConfigPath, formatStartupError, loadConfig, type ValidConfig } from '../../src/config/index.ts'
import { LoomError } from '../../src/errors/index.ts'

const MINIMAL = 'model:\n  id: tiny\n  path: ./models/tiny\nplugins:\n  - use: ./runtime.ts\n'

/** Write `text` as loom.yaml in a fresh directory and load it with `env`; messages show `loom.yaml`. */
async function load(t: Test, text: string, env: Record<string, string> = {}): Promise<ValidConfig> {
  const dir = t.testdir({ 'loom.yaml': text })
  return loadConfig(path.join(dir, 'loom.yaml'), { env, cwd: dir })
}

/** Assert that loading `text` fails with exactly `code` and `message`. */
async function rejects(t: Test, text: string, code: string, message: string, env: Record<string, string> = {}) {
  const err = await load(t, text, env).then(
    () => t.fail('expected the configuration to be refused'),
    (e: unknown) => e,
  )
  t.ok(err instanceof LoomError, 'a LoomError')
  t.equal((err as LoomError).code, code)
  t.equal((err as Error).message, message)
}

t.test('bad configuration files name the file, the key, the expectation and the value', async (t) => {
  t.test('typo in a key suggests the closest known key', (t) =>
    rejects(
      t,
      `${MINIMAL}limits:\n  max_batch_sise: 64\n`,
      'config_invalid',
      'loom.yaml: `limits.max_batch_sise` is not a known key (did you mean `max_batch_size`?); found 64',
    ),
  )
  t.test('wrong type', (t) =>
    rejects(
      t,
      `${MINIMAL}limits:\n  max_batch_size: lots\n`,
      'config_invalid',
      'loom.yaml: `limits.max_batch_size` must be a number; found "lots"',
    ),
  )
  t.test('a fraction where an integer is needed', (t) =>
    rejects(
      t,
      `${MINIMAL}limits:\n  max_batch_size: 2.5\n`,
      'config_invalid',
      'loom.yaml: `limits.max_batch_size` must be an integer; found 2.5',
    ),
  )
  t.test('out of range', (t) =>
    rejects(
      t,
      `${MINIMAL}server:\n  port: 70000\n`,
      'config_invalid',
      'loom.yaml: `server.port` must be <= 65535; found 70000',
    ),
  )
  t.test('not one of the allowed values', (t) =>
    rejects(
      t,
      `${MINIMAL}server:\n  log_level: loud\n`,
      'config_invalid',
      'loom.yaml: `server.log_level` must be one of `fatal`, `error`, `warn`, `info`, `debug`, `trace`, `silent`; found "loud"',
    ),
  )
  t.test('missing required key model.path', (t) =>
    rejects(
      t,
      'model:\n  id: tiny\nplugins:\n  - use: ./runtime.ts\n',
      'config_invalid',
      'loom.yaml: `model.path` is required; found nothing',
    ),
  )
  t.test('unknown top-level key lists the known ones', (t) =>
    rejects(
      t,
      `${MINIMAL}telemetry: true\n`,
      'config_invalid',
      'loom.yaml: `telemetry` is not a known key (known keys: `server`, `model`, `limits`, `adapters`, `speculation`, `structured_output`, `metrics`, `plugins`); found true',
    ),
  )
  t.test('misspelled top-level section', (t) =>
    rejects(
      t,
      `${MINIMAL}limit:\n  max_batch_size: 4\n`,
      'config_invalid',
      'loom.yaml: `limit` is not a known key (did you mean `limits`?); found {"max_batch_size":4}',
    ),
  )
  t.test('empty plugin list', (t) =>
    rejects(
      t,
      'model:\n  id: tiny\n  path: m\nplugins: []\n',
      'config_invalid',
      'loom.yaml: `plugins` must list at least one entry; found []',
    ),
  )
  t.test('wrong type inside the plugin list', (t) =>
    rejects(
      t,
      'model:\n  id: tiny\n  path: m\nplugins:\n  - use: ./a.ts\n  - use: 42\n',
      'config_invalid',
      'loom.yaml: `plugins[1].use` must be a string; found 42',
    ),
  )
  t.test('missing environment variable', (t) =>
    rejects(
      t,
      `${MINIMAL}server:\n  host: \${LOOM_HOST}\n`,
      'config_env_missing',
      'loom.yaml: `server.host` uses ${LOOM_HOST}, but the environment variable LOOM_HOST is not set',
    ),
  )
  t.test('malformed ${...} reference', (t) =>
    rejects(
      t,
      `${MINIMAL}server:\n  host: "\${LOOM HOST}"\n`,
      'config_invalid',
      'loom.yaml: `server.host` has a malformed `${...}` reference (write ${NAME} or ${NAME:-default}); found "${LOOM HOST}"',
    ),
  )
  t.test('invalid YAML reports line and column', (t) =>
    rejects(
      t,
      'model:\n  id: tiny\n  path: [models\nplugins:\n  - use: ./runtime.ts\n',
      'config_yaml_invalid',
      'loom.yaml: not valid YAML: line 4, column 1: Flow sequence in block collection must be sufficiently indented and end with a ]',
    ),
  )
  t.test('duplicate keys are YAML errors', (t) =>
    rejects(
      t,
      `${MINIMAL}model:\n  id: again\n`,
      'config_yaml_invalid',
      'loom.yaml: not valid YAML: line 6, column 1: Map keys must be unique',
    ),
  )
  t.test('${...} inside a flow mapping gets a hint', (t) =>
    rejects(
      t,
      `${MINIMAL}server: { port: \${PORT} }\n`,
      'config_yaml_invalid',
      'loom.yaml: not valid YAML: line 6, column 18: Unexpected flow-map-start at node end (quote values that use ${...} inside `{ }` or `[ ]`)',
    ),
  )
  t.test('empty file', (t) =>
    rejects(
      t,
      '',
      'config_invalid',
      'loom.yaml: `(top level)` must be a mapping with at least `model:` and `plugins:`; found an empty file',
    ),
  )
  t.test('a list instead of a mapping', (t) =>
    rejects(
      t,
      '- model\n- plugins\n',
      'config_invalid',
      'loom.yaml: `(top level)` must be a mapping; found ["model","plugins"]',
    ),
  )
  t.test('a value from the environment is never echoed', (t) =>
    rejects(
      t,
      `${MINIMAL}server:\n  port: "\${LOOM_PORT}"\n`,
      'config_invalid',
      'loom.yaml: `server.port` must be a number; found the value of ${LOOM_PORT}',
      { LOOM_PORT: 's3cr3t-looking' },
    ),
  )
  t.test('unreadable file', async (t) => {
    const dir = t.testdir({})
    const err = await loadConfig('nope.yaml', { cwd: dir, env: {} }).catch((e: unknown) => e)
    t.equal((err as LoomError).code, 'config_unreadable')
    t.equal((err as Error).message, 'nope.yaml: cannot read the configuration file: no such file')
  })
})

t.test('environment substitution', async (t) => {
  const config = await load(
    t,
    [
      'server:',
      '  host: ${LOOM_HOST:-127.0.0.1}',
      '  port: ${LOOM_PORT}',
      'model:',
      '  id: ${MODEL_ID:-tiny}-chat',
      '  path: ${MODEL_DIR}',
      'adapters:',
      '  default_source: "${SOURCE:-local}"',
      '  cache_dir: $${NOT_A_VAR}',
      'plugins:',
      '  - use: ./runtime.ts',
      '    options:',
      '      enabled: ${ENABLED:-true}',
      '      label: "${ENABLED:-true}"',
      '',
    ].join('\n'),
    { LOOM_PORT: '8080', MODEL_DIR: 'weights/tiny', MODEL_ID: '' },
  )
  t.equal(config.server.host, '127.0.0.1', 'default used when unset')
  t.equal(config.server.port, 8080, 'a plain whole reference is read as a YAML number')
  t.equal(config.model.id, 'tiny-chat', 'default used when empty, inside a longer string')
  t.equal(config.model.path, path.join(config.dir, 'weights/tiny'))
  t.equal(config.adapters.default_source, 'local')
  t.equal(config.adapters.cache_dir, path.join(config.dir, '${NOT_A_VAR}'), '$$ escapes')
  t.same(config.plugins[0]?.options, { enabled: true, label: 'true' }, 'quoted references stay strings')
})

t.test('paths resolve against the configuration file, defaults fill the rest, result is frozen', async (t) => {
  const config = await load(t, MINIMAL)
  t.equal(config.file, path.join(config.dir, 'loom.yaml'))
  t.equal(config.model.path, path.join(config.dir, 'models/tiny'))
  t.equal(config.adapters.cache_dir, path.join(config.dir, '.loom-cache/adapters'))
  t.equal(config.limits.max_batch_size, 32)
  t.equal(config.server.port, 3000)
  t.ok(Object.isFrozen(config) && Object.isFrozen(config.model) && Object.isFrozen(config.plugins[0]))

  const absolute = await load(
    t,
    'model:\n  id: x\n  path: /srv/models/x\nadapters:\n  cache_dir: /var/cache/loom\nplugins:\n  - use: a\n',
  )
  t.equal(absolute.model.path, '/srv/models/x')
  t.equal(absolute.adapters.cache_dir, '/var/cache/loom')
})

t.test('chooseConfigPath: --config > LOOM_CONFIG > config/default.yaml', async (t) => {
  const cwd = '/srv/loom'
  t.equal(chooseConfigPath(['serve', '--config', 'a.yaml'], { LOOM_CONFIG: 'b.yaml' }, cwd), '/srv/loom/a.yaml')
  t.equal(
    chooseConfigPath(['serve', '--config', 'config/default.yaml', '--config', 'mine.yaml'], {}, cwd),
    '/srv/loom/mine.yaml',
    'the last --config wins (npm start -- --config mine.yaml)',
  )
  t.equal(chooseConfigPath(['serve', '--config=a.yaml', '--config', 'c.yaml'], {}, cwd), '/srv/loom/c.yaml')
  t.equal(chooseConfigPath(['serve', '--config=/etc/loom.yaml'], { LOOM_CONFIG: 'b.yaml' }, cwd), '/etc/loom.yaml')
  t.equal(chooseConfigPath(['serve'], { LOOM_CONFIG: 'b.yaml' }, cwd), '/srv/loom/b.yaml')
  t.equal(chooseConfigPath(['serve'], { LOOM_CONFIG: '' }, cwd), '/srv/loom/config/default.yaml')
  t.equal(chooseConfigPath([], {}, cwd), '/srv/loom/config/default.yaml')
  t.throws(() => chooseConfigPath(['serve', '--config'], {}, cwd), {
    code: 'config_unreadable',
    message: '--config: cannot read the configuration file: the option needs a file path',
  })
})

t.test('formatStartupError prints code and message, never a stack', async (t) => {
  const err = new LoomError('contract_missing', { contract: 'a Backend or StepRunner', example: '`x`' })
  t.equal(
    formatStartupError(err),
    '[contract_missing] No plugin provides a Backend or StepRunner; add one to `plugins:` (for example `x`)',
  )
  t.equal(formatStartupError(new Error('boom')), '[internal_error] boom')
  t.notMatch(formatStartupError(new Error('boom')), /\n\s+at /)
})
