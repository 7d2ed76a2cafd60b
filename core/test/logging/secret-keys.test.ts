import t from 'tap'
import { REDACTED, isSecretField, isSecretKey, redactObject } from '../../src/logging/index.ts'

t.test('isSecretKey judges a key by its name alone', async (t) => {
  for (const key of ['token', 'api_token', 'hfToken', 'Authorization', 'password', 'db_passphrase']) {
    t.ok(isSecretKey(key), key)
  }
  for (const key of ['s3_access_key', 'ssh-private-key', 'credentials', 'gcp_credential', 'use_global_token']) {
    t.ok(isSecretKey(key), key)
  }
  for (const key of ['eos_token', 'pad_token', 'max_tokens', 'access_key_id', 'name', 'tokenizer']) {
    t.notOk(isSecretKey(key), key)
  }
})

t.test('logs redact the new credential endings when they hold text', async (t) => {
  t.ok(isSecretField('s3_access_key', 'AKIA-x'))
  t.notOk(isSecretField('credentials', false), 'a flag saying whether credentials exist is kept')
  t.same(redactObject({ source: 's3', credentials: 'k:s', passphrase: 'p' }), {
    source: 's3',
    credentials: REDACTED,
    passphrase: REDACTED,
  })
})

t.test('redactObject takes a stricter text redactor', async (t) => {
  t.same(
    redactObject({ url: 'https://u@h', token: 'x' }, (text) => text.toUpperCase()),
    { url: 'HTTPS://U@H', token: REDACTED },
  )
})
