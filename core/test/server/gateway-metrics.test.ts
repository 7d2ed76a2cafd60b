import { request, type ClientRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/**
 * Issue 18, point 1: the inference gateway's series. With requests for several adapters running
 * and queued, a scrape names exactly those adapters in the right label, with the right counts.
 */

/** The value of an unlabelled series, or undefined when absent. */
function value(metrics: string, name: string): number | undefined {
  const match = new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)
  return match ? Number(match[1]) : undefined
}

t.test('vllm:* series under mixed-adapter load', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { hiddenSize: 32, numLayers: 1, seed: 3, maxPositionEmbeddings: 2048 })
  for (const [i, name] of ['alpha', 'beta', 'gamma'].entries()) {
    await buildLoraAdapter(join(dir, 'adapters', name), { model: config, rank: 4, alpha: 8, seed: 40 + i })
  }
  const test = await startTestServer(join(dir, 'server'), modelDir, {
    adapterRoot: join(dir, 'adapters'),
    limits: { max_total_tokens: 2048, max_batch_size: 2 },
    nativeOptions: { kv_cache_tokens: 16384, adapter_slots: 8 },
    logLevel: 'warn',
  })
  t.teardown(() => test.close())
  await test.server.listen({ host: '127.0.0.1', port: 0 })
  const { port } = test.server.app.server.address() as AddressInfo
  const stats = () => test.server.backend.stats()
  const scrape = async () => (await test.server.app.inject({ method: 'GET', url: '/metrics' })).body

  const idle = await scrape()
  t.equal(value(idle, 'vllm:num_requests_running'), 0)
  t.equal(value(idle, 'vllm:num_requests_waiting'), 0)
  t.equal(value(idle, 'vllm:kv_cache_usage_perc'), 0)
  t.match(idle, /^vllm:lora_requests_info\{running_lora_adapters="",waiting_lora_adapters="",max_lora="8"\} \d/m)
  t.match(idle, /^# TYPE vllm:lora_requests_info gauge$/m)

  // Long generations, sent one at a time so the batch (2 rows) and the queue fill in a known order.
  const clients: ClientRequest[] = []
  t.teardown(() => clients.forEach((c) => c.destroy()))
  const send = async (adapter: string | null, expectInBackend: number) => {
    const req = request({ host: '127.0.0.1', port, path: '/generate_stream', method: 'POST' })
    req.setHeader('content-type', 'application/json')
    req.on('error', () => undefined)
    req.on('response', (res) => res.resume())
    req.end(
      JSON.stringify({
        inputs: 'hello there',
        parameters: { max_new_tokens: 2000, ignore_eos_token: true, ...(adapter ? { adapter_id: adapter } : {}) },
      }),
    )
    clients.push(req)
    const deadline = Date.now() + 10_000
    while (stats().runningRequests + stats().queuedRequests < expectInBackend && Date.now() < deadline) await sleep(5)
  }
  await send('alpha', 1)
  await send('beta', 2)
  await send('gamma', 3)
  await send(null, 4)
  await send('alpha', 5)

  const busy = await scrape()
  const now = stats()
  t.equal(now.runningRequests, 2, 'two rows run (max_batch_size 2)')
  t.equal(value(busy, 'vllm:num_requests_running'), 2)
  t.equal(value(busy, 'vllm:num_requests_waiting'), 3)
  const info =
    /^vllm:lora_requests_info\{running_lora_adapters="([^"]*)",waiting_lora_adapters="([^"]*)",max_lora="(\d+)"\} (\S+)$/m.exec(
      busy,
    )
  t.ok(info, 'one series with the three labels')
  const list = (label: string) => label.split(',').sort()
  t.same(list(info![1]!), ['alpha', 'beta'], 'running: the adapters of the two running rows')
  t.same(
    list(info![2]!),
    ['alpha', 'gamma'],
    'waiting: the adapters of the queued requests, each once; the base model is none',
  )
  t.equal(info![3], '8', 'max_lora: the adapter slots')
  t.equal((busy.match(/^vllm:lora_requests_info\{/gm) ?? []).length, 1, 'one current label set')
  const usage = value(busy, 'vllm:kv_cache_usage_perc')!
  t.ok(usage > 0 && usage < 1, `KV cache usage is a fraction (${usage})`)
  t.equal(value(busy, 'vllm:gpu_cache_usage_perc'), usage, 'the older name reads the same')
  const changed = Number(/^vllm:lora_requests_info\{[^}]*\} (\S+)$/m.exec(busy)![1])
  t.ok(Math.abs(changed - Date.now() / 1000) < 60, 'the value is a Unix time in seconds')

  // A scrape with nothing changed keeps the time of the change.
  const again = await scrape()
  const stillRunning = stats().runningRequests === 2 && stats().queuedRequests === 3
  if (stillRunning) t.equal(Number(/^vllm:lora_requests_info\{[^}]*\} (\S+)$/m.exec(again)![1]), changed)
})

t.test('metrics.inference_gateway: false exports no vllm:* series', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { hiddenSize: 32, numLayers: 1, seed: 3 })
  const test = await startTestServer(join(dir, 'server'), modelDir, {
    metrics: { inference_gateway: false },
    logLevel: 'warn',
  })
  t.teardown(() => test.close())
  const body = (await test.server.app.inject({ method: 'GET', url: '/metrics' })).body
  t.notMatch(body, /vllm:/)
  t.match(body, /^loom_request_count /m, "Loom's own series stay")
})
