/**
 * The whole server over HTTP with `@loom/backend-trtllm` on the fake executor, configured in YAML
 * as a user would: the native routes (/generate, /generate_stream), the v1 routes through the
 * official openai SDK, a LoRA adapter by id and as the `model`, a refused `response_format`,
 * /metrics, a client that hangs up, and a clean close.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import OpenAI from 'openai'
import t from 'tap'
import { stringify } from 'yaml'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { loadConfig } from '../../../core/src/config/index.ts'
import { LoomServer } from '../../../core/src/server/loom-server.ts'
import { HfTokenizerLoader } from '../../../core/src/tokenizer/index.ts'
import { fakeToken } from '../src/native-api.ts'
import { writeEngineConfig } from './engine-fixture.ts'

const dir = t.testdir()
const modelDir = join(dir, 'model')
const model = await buildModel(modelDir, { numLayers: 2, hiddenSize: 32, intermediateSize: 48, seed: 5 })
writeEngineConfig(join(dir, 'engines', 'tiny'), model, { maxSeqLen: 256 })
await buildLoraAdapter(join(dir, 'adapters', 'lora-a'), { model, rank: 4, targetModules: ['q_proj', 'v_proj'] })
await buildLoraAdapter(join(dir, 'adapters', 'lora-b'), {
  model,
  rank: 2,
  targetModules: ['q_proj', 'v_proj'],
  seed: 9,
})
const configFile = join(dir, 'loom.yaml')
await mkdir(join(dir, 'cache'), { recursive: true })
await writeFile(
  configFile,
  stringify({
    server: { port: 0, host: '127.0.0.1', log_level: 'warn' },
    model: { id: 'tiny-llama', path: modelDir },
    limits: { max_total_tokens: 256 },
    adapters: { default_source: 'local', cache_dir: join(dir, 'cache') },
    plugins: [
      { use: '@loom/backend-trtllm', options: { engine_dir: 'engines/tiny', allow_fake: true } },
      { use: '@loom/source-local', options: { roots: [join(dir, 'adapters')] } },
    ],
  }),
)
const logs: string[] = []
const server = await LoomServer.create(await loadConfig(configFile), {
  logDestination: new Writable({
    write(chunk: Buffer, _encoding, done) {
      logs.push(chunk.toString('utf8'))
      done()
    },
  }),
})
t.teardown(() => server.close())
await server.start()
await server.listen({ host: '127.0.0.1', port: 0 })
const baseUrl = `http://127.0.0.1:${(server.app.server.address() as AddressInfo).port}`
const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'any-key', maxRetries: 0 })
const tokenizer = (await new HfTokenizerLoader().load(modelDir))!

/** What the fake generates for a prompt sent greedily to the base model. */
function expected(promptIds: readonly number[], count: number): number[] {
  return Array.from(
    { length: count },
    (_, position) =>
      fakeToken({ inputIds: promptIds, taskId: 0, seed: 0n, temperature: 1, position }, model.vocab_size).token,
  )
}

async function post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  return { status: res.status, json: (await res.json()) as Record<string, unknown> }
}

type Details = { finish_reason: string; generated_tokens: number; tokens: { id: number }[] }

t.test('/generate: the fake model tokens for the prompt, as the native API reports them', async (t) => {
  const { status, json } = await post('/generate', {
    inputs: 'Hello there',
    parameters: { max_new_tokens: 6, details: true, seed: 7 },
  })
  t.equal(status, 200, JSON.stringify(json))
  const details = json.details as Details
  const ids = expected(tokenizer.encode('Hello there', { addSpecialTokens: true }), 6)
  t.same(
    details.tokens.map((tok) => tok.id),
    ids,
  )
  t.equal(details.finish_reason, 'length')
  t.equal(details.generated_tokens, 6)
  t.equal(json.generated_text, tokenizer.decode(ids, { skipSpecialTokens: true }))
})

t.test('/generate_stream: the same tokens as server-sent events', async (t) => {
  const res = await fetch(`${baseUrl}/generate_stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: 'Hello there', parameters: { max_new_tokens: 6, details: true } }),
  })
  t.equal(res.status, 200)
  const events = (await res.text())
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => JSON.parse(line.slice(5)) as { token: { id: number }; details: Details | null })
  t.same(
    events.map((e) => e.token.id),
    expected(tokenizer.encode('Hello there', { addSpecialTokens: true }), 6),
  )
  t.equal(events.at(-1)!.details!.finish_reason, 'length')
})

t.test('a LoRA adapter by adapter_id changes the tokens, the same way every time', async (t) => {
  const body = { inputs: 'Hello there', parameters: { max_new_tokens: 6, details: true, adapter_id: 'lora-a' } }
  const first = await post('/generate', body)
  t.equal(first.status, 200, JSON.stringify(first.json))
  const second = await post('/generate', body)
  const ids = (r: typeof first): number[] => (r.json.details as Details).tokens.map((tok) => tok.id)
  t.same(ids(second), ids(first))
  t.notSame(ids(first), expected(tokenizer.encode('Hello there', { addSpecialTokens: true }), 6))
})

t.test('merged adapters are loaded, sent and cached like any other', async (t) => {
  const merged = { ids: ['lora-a', 'lora-b'], weights: [0.5, 0.5], merge_strategy: 'linear' }
  const body = { inputs: 'Hello there', parameters: { max_new_tokens: 6, details: true, merged_adapters: merged } }
  const first = await post('/generate', body)
  t.equal(first.status, 200, JSON.stringify(first.json))
  const again = await post('/generate', body)
  const alone = await post('/generate', {
    ...body,
    parameters: { max_new_tokens: 6, details: true, adapter_id: 'lora-a' },
  })
  const ids = (r: typeof first): number[] => (r.json.details as Details).tokens.map((tok) => tok.id)
  t.same(ids(again), ids(first))
  t.notSame(ids(first), ids(alone), 'its own task, not one of its inputs')
})

t.test('v1 through the openai SDK: chat, completions, streamed or not, an adapter as the model', async (t) => {
  const chat = await client.chat.completions.create({
    model: 'tiny-llama',
    messages: [{ role: 'user', content: 'Say hi' }],
    max_tokens: 5,
    temperature: 0,
  })
  t.equal(chat.choices[0]!.finish_reason, 'length')
  t.equal(chat.usage?.completion_tokens, 5)
  const stream = await client.chat.completions.create({
    model: 'tiny-llama',
    messages: [{ role: 'user', content: 'Say hi' }],
    max_tokens: 5,
    temperature: 0,
    stream: true,
  })
  let streamed = ''
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? ''
  t.equal(streamed, chat.choices[0]!.message.content, 'streamed text equals the whole answer')

  const completion = await client.completions.create({
    model: 'tiny-llama',
    prompt: 'Once upon',
    max_tokens: 4,
    temperature: 0,
  })
  const ids = expected(tokenizer.encode('Once upon', { addSpecialTokens: true }), 4)
  t.equal(completion.choices[0]!.text, tokenizer.decode(ids, { skipSpecialTokens: true }))
  const adapted = await client.completions.create({
    model: 'lora-a',
    prompt: 'Once upon',
    max_tokens: 4,
    temperature: 0,
  })
  t.equal(adapted.model, 'lora-a')
  // The adapter's task id hashes its revision, which covers the files' modification times, so
  // its fake tokens differ from run to run and may meet the end id early (1 token in one CI run).
  // Either way the count must agree with the reason the completion gives.
  const reason = adapted.choices[0]!.finish_reason
  const count = adapted.usage?.completion_tokens ?? -1
  if (reason === 'length') t.equal(count, 4, 'a completion cut by max_tokens has all 4 tokens')
  else t.ok(reason === 'stop' && count >= 0 && count < 4, `an early end is a stop (${reason}, ${count} tokens)`)
})

t.test('response_format is refused with a clear error when guided decoding is off', async (t) => {
  const res = await post('/v1/chat/completions', {
    model: 'tiny-llama',
    messages: [{ role: 'user', content: 'json please' }],
    max_tokens: 5,
    response_format: { type: 'json_object' },
  })
  t.equal(res.status, 422)
  t.match(JSON.stringify(res.json), /guided_decoding/)
})

t.test('a client that hangs up mid-stream cancels its request', async (t) => {
  const controller = new AbortController()
  const res = await fetch(`${baseUrl}/generate_stream`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: 'Long story', parameters: { max_new_tokens: 200 } }),
    signal: controller.signal,
  })
  const reader = res.body!.getReader()
  await reader.read()
  controller.abort()
  await reader.read().catch(() => undefined)
  // The executor's final response for it arrives within a few of its 1 ms steps.
  for (let i = 0; i < 100 && server.backend.stats().runningRequests > 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  t.equal(server.backend.stats().runningRequests, 0)
})

t.test('/metrics and /info show the backend', async (t) => {
  const metrics = await (await fetch(`${baseUrl}/metrics`)).text()
  t.match(metrics, /^loom_kv_blocks_total [1-9]\d*$/m)
  const info = (await (await fetch(`${baseUrl}/info`)).json()) as Record<string, unknown>
  t.match(JSON.stringify(info), /trtllm-fake/)
})

t.test('nothing was logged as an error', async (t) => {
  const errors = logs.filter((line) => /"level":(50|60)/.test(line))
  t.same(errors, [])
})
