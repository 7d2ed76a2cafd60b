import path from 'node:path'
import t, { type Test } from 'tap'
import { formatStartupError, loadConfig } from '../../src/config/index.ts'
import { looksLikeSecretKey } from '../../src/config/secret-keys.ts'
import { LoomError } from '../../src/errors/index.ts'

/**
 * Startup errors are printed to the terminal and land in CI logs: the value found at a key is
 * shown to help fix a typo, but never when it may be a credential.
 */

const MINIMAL = 'model:\n  id: tiny\n  path: ./models/tiny\nplugins:\n  - use: ./runtime.ts\n'

/** Load `text` as loom.yaml and return the error's printed line; fails when nothing is refused. */
async function printed(t: Test, text: string, env: Record<string, string> = {}): Promise<string> {
  const dir = t.testdir({ 'loom.yaml': text })
  const err = await loadConfig(path.join(dir, 'loom.yaml'), { env, cwd: dir }).then(
    () => t.fail('expected the configuration to be refused'),
    (e: unknown) => e,
  )
  t.ok(err instanceof LoomError, 'a LoomError')
  return formatStartupError(err)
}

/** Assert the printed line, and that no `QA-SECRET` text reached it. */
async function prints(t: Test, text: string, expected: string, env: Record<string, string> = {}) {
  const line = await printed(t, text, env)
  t.equal(line, expected)
  t.notMatch(line, /QA-SECRET/, 'the secret is not printed')
}

t.test('values of secret-looking keys are never printed', async (t) => {
  t.test('an unknown secret key in a core section', (t) =>
    prints(
      t,
      `${MINIMAL}adapters:\n  api_key: QA-SECRET-1\n`,
      '[config_invalid] loom.yaml: `adapters.api_key` is not a known key (known keys: `default_source`, `cache_dir`, `auth_ttl_s`, `resolve_ttl_s`, `host_cache_mb`, `slot_wait_s`, `download_attempts`, `preload`); found (value not shown)',
    ),
  )
  t.test('an unknown top-level key that is a misspelt secret', (t) =>
    prints(
      t,
      `${MINIMAL}pasword: QA-SECRET-2\n`,
      '[config_invalid] loom.yaml: `pasword` is not a known key (known keys: `server`, `model`, `limits`, `adapters`, `speculation`, `structured_output`, `metrics`, `plugins`); found (value not shown)',
    ),
  )
  t.test('misspelt and other credential names', async (t) => {
    for (const key of [
      'hf_tokn',
      'secert',
      'toekn',
      'api_kye',
      'db_pasword',
      'Access-Key',
      'credentials',
      'passphrase',
    ]) {
      const line = await printed(t, `${MINIMAL}${key}: QA-SECRET-3\n`)
      t.match(line, `\`${key}\` is not a known key`)
      t.match(line, /; found \(value not shown\)$/, key)
    }
  })
  t.test('a secret nested in a wrongly typed section', (t) =>
    prints(
      t,
      `${MINIMAL}speculation:\n  medusa_adapter: [{ id: heads, token: QA-SECRET-4 }]\n`,
      '[config_invalid] loom.yaml: `speculation.medusa_adapter` must be a mapping; found (value not shown)',
    ),
  )
  t.test('a malformed ${...} reference in a secret value', (t) =>
    prints(
      t,
      `${MINIMAL}    options:\n      password: "QA-SECRET-6\${"\n`,
      '[config_invalid] loom.yaml: `plugins[0].options.password` has a malformed `${...}` reference (write ${NAME} or ${NAME:-default}); found (value not shown)',
    ),
  )
})

t.test('credentials inside other values are masked', async (t) => {
  t.test('a URL with userinfo', (t) =>
    prints(
      t,
      `${MINIMAL}adapters:\n  default_source: ["https://qauser:QA-SECRET-7@hub.example/x"]\n`,
      '[config_invalid] loom.yaml: `adapters.default_source` must be a string; found ["https://[Redacted]@hub.example/x"]',
    ),
  )
  t.test('a URL whose user part is a token', (t) =>
    prints(
      t,
      `${MINIMAL}server:\n  port: "https://QA-SECRET-8@proxy.example:8080"\n`,
      '[config_invalid] loom.yaml: `server.port` must be a number; found "https://[Redacted]@proxy.example:8080"',
    ),
  )
  t.test('a long value is masked before it is cut short', async (t) => {
    const url = `https://${'u'.repeat(70)}:QA-SECRET-9@hub.example`
    const line = await printed(t, `${MINIMAL}server:\n  port: "${url}"\n`)
    t.notMatch(line, /QA-SECRET|uuuu/)
    t.match(line, /found "https:\/\/\[Redacted\]@hub\.example"$/)
  })
  t.test('known token formats and credential parameters', (t) =>
    prints(
      t,
      `${MINIMAL}server:\n  port: "https://hub.example/x?api_token=QA-SECRET-10&rev=main"\n`,
      '[config_invalid] loom.yaml: `server.port` must be a number; found "https://hub.example/x?api_token=[Redacted]&rev=main"',
    ),
  )
})

t.test('ordinary values are still shown', async (t) => {
  t.test('a typo of a key that is not a secret', (t) =>
    prints(
      t,
      `${MINIMAL}limits:\n  max_new_tokens: 64\n`,
      '[config_invalid] loom.yaml: `limits.max_new_tokens` is not a known key (known keys: `max_input_length`, `max_total_tokens`, `max_batch_size`, `max_batch_prefill_tokens`, `max_concurrent_requests`, `max_stop_sequences`); found 64',
    ),
  )
  t.test('a section holding ordinary keys', (t) =>
    prints(
      t,
      `${MINIMAL}limit:\n  max_total_tokens: 512\n`,
      '[config_invalid] loom.yaml: `limit` is not a known key (did you mean `limits`?); found {"max_total_tokens":512}',
    ),
  )
  t.test('a URL without userinfo', (t) =>
    prints(
      t,
      `${MINIMAL}server:\n  port: "https://hub.example/@org/x"\n`,
      '[config_invalid] loom.yaml: `server.port` must be a number; found "https://hub.example/@org/x"',
    ),
  )
  t.test('a substituted secret is named by its variable', (t) =>
    prints(
      t,
      `${MINIMAL}adapters:\n  token: \${HF_TOKEN}\n`,
      '[config_invalid] loom.yaml: `adapters.token` is not a known key (known keys: `default_source`, `cache_dir`, `auth_ttl_s`, `resolve_ttl_s`, `host_cache_mb`, `slot_wait_s`, `download_attempts`, `preload`); found the value of ${HF_TOKEN}',
      { HF_TOKEN: 'QA-SECRET-11' },
    ),
  )
})

t.test('which keys look like credentials', async (t) => {
  for (const key of ['token', 'api_token', 'hfToken', 'tokn', 'hf_tokn', 'toekn', 'pasword', 'secert', 'X-Api-Key']) {
    t.ok(looksLikeSecretKey(key), key)
  }
  // Every key of the core schema and the bundled plugins' options that holds no credential.
  const ordinary = [
    ...['host', 'port', 'body_limit', 'log_level', 'id', 'path', 'max_input_length', 'max_total_tokens'],
    ...['max_batch_size', 'max_batch_prefill_tokens', 'max_concurrent_requests', 'max_stop_sequences'],
    ...['default_source', 'cache_dir', 'auth_ttl_s', 'resolve_ttl_s', 'host_cache_mb', 'slot_wait_s'],
    ...['download_attempts', 'preload', 'source', 'medusa_adapter', 'medusa_choices', 'max_tokens', 'use'],
    ...['options', 'server', 'model', 'limits', 'adapters', 'speculation', 'plugins', 'hub_url', 'name'],
    ...['timeout_ms', 'retries', 'endpoint', 'max_attempts', 'retry_base_ms', 'region', 'force_path_style'],
    ...['list_timeout_ms', 'request_timeout_ms', 'roots', 'device', 'kv_cache_tokens', 'max_new_tokens'],
    ...['adapter_slots', 'kv_block_size', 'kv_cache_mb', 'max_batch_tokens', 'max_context_length'],
    ...['max_lora_rank', 'threads', 'repo', 'version', 'eos_token', 'pad_token', 'tokenizer', 'key', 'author'],
  ]
  for (const key of ordinary) t.notOk(looksLikeSecretKey(key), key)
})
