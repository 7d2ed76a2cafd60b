import t from 'tap'
import { copyFileSync, existsSync, mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { buildModel } from '@loom/testkit'
import { startTestServer } from '../server/test-server.ts'
import { LORA_TINY_MODEL } from '../../../tools/fixtures/lora-tiny-options.ts'

/**
 * Acceptance (issue 4 §4) over HTTP on the native CPU backend: the committed torch.save adapter
 * generates exactly the tokens of its safetensors twin, and a hostile .bin is refused with a 422
 * that names the global, without running it.
 */

const FIXTURES = join(import.meta.dirname, 'fixtures')
const TWIN = join(FIXTURES, 'lora-tiny')
const MARKER = '/tmp/loom-torch-bin-pwned'

t.test('/generate with the .bin adapter gives the tokens of its safetensors twin', async (t) => {
  rmSync(MARKER, { force: true })
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  // The fixture adapter was built for this model; the test kit rebuilds it bit for bit.
  await buildModel(modelDir, LORA_TINY_MODEL)
  const adapters = join(dir, 'adapters')
  const place = (name: string, weights: [string, string][]): void => {
    mkdirSync(join(adapters, name), { recursive: true })
    copyFileSync(join(TWIN, 'adapter_config.json'), join(adapters, name, 'adapter_config.json'))
    for (const [from, to] of weights) copyFileSync(from, join(adapters, name, to))
  }
  place('st', [[join(TWIN, 'adapter_model.safetensors'), 'adapter_model.safetensors']])
  place('bin', [[join(TWIN, 'adapter_model.bin'), 'adapter_model.bin']])
  place('evil', [[join(FIXTURES, 'torch-bin', 'malicious-os-system.bin'), 'adapter_model.bin']])

  const test = await startTestServer(join(dir, 'server'), modelDir, { adapterRoot: adapters })
  t.teardown(() => test.close())
  const generate = async (inputs: string, adapterId?: string) => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      payload: {
        inputs,
        parameters: {
          max_new_tokens: 16,
          details: true,
          ...(adapterId === undefined ? {} : { adapter_id: adapterId }),
        },
      },
    })
    return { status: res.statusCode, body: res.body }
  }
  // Every generated token with its id and logprob: equal logprobs mean equal logits, not just equal argmaxes.
  type Token = { id: number; logprob: number; text: string }
  const tokens = (r: { status: number; body: string }): Token[] => {
    if (r.status !== 200) t.fail(`HTTP ${r.status}: ${r.body}`)
    return (JSON.parse(r.body) as { details: { tokens: Token[] } }).details.tokens
  }
  const ids = (toks: Token[]): string => toks.map((tok) => tok.id).join(',')

  for (const prompt of ['Once upon a time', 'The quick brown fox', 'a']) {
    const st = tokens(await generate(prompt, 'st'))
    const bin = tokens(await generate(prompt, 'bin'))
    t.equal(st.length, 16, `${prompt}: 16 tokens`)
    t.same(bin, st, `${prompt}: .bin tokens and logprobs equal the safetensors ones`)
    t.ok(
      st.every((tok) => typeof tok.logprob === 'number' && Number.isFinite(tok.logprob)),
      'logprobs are reported',
    )
    const base = tokens(await generate(prompt))
    t.not(ids(base), ids(st), `${prompt}: the adapter changes the output`)
  }

  const evil = await generate('Once upon a time', 'evil')
  t.equal(evil.status, 422, evil.body)
  t.match(evil.body, 'pickle refers to `os.system`, which is not allowed')
  t.notOk(existsSync(MARKER), `${MARKER} was not created`)
})
