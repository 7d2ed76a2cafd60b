import { join } from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/**
 * The request and batch histograms of `/metrics` are fed by real generations: every phase of a
 * request (validation, queue, inference, per-token time) and every runner step, by method.
 */
t.test('a generation records every request phase and its batch steps', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 9 })
  const test = await startTestServer(join(dir, 'server'), modelDir)
  t.teardown(() => test.close())

  const res = await test.server.app.inject({
    method: 'POST',
    url: '/generate',
    payload: { inputs: 'hello there', parameters: { max_new_tokens: 5, ignore_eos_token: true } },
  })
  t.equal(res.statusCode, 200)
  const text = (await test.server.app.inject({ method: 'GET', url: '/metrics' })).body
  const value = (name: string): number => {
    const match = new RegExp(`^${name.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(text)
    return match ? Number(match[1]) : NaN
  }
  for (const name of [
    'loom_request_duration',
    'loom_request_validation_duration',
    'loom_request_queue_duration',
    'loom_request_inference_duration',
    'loom_request_mean_time_per_token_duration',
    'loom_request_max_new_tokens',
  ]) {
    t.equal(value(`${name}_count`), 1, `${name} observed once`)
  }
  t.equal(value('loom_request_max_new_tokens_sum'), 5, 'the requested max_new_tokens')
  const duration = value('loom_request_duration_sum')
  const phases =
    value('loom_request_validation_duration_sum') +
    value('loom_request_queue_duration_sum') +
    value('loom_request_inference_duration_sum')
  t.ok(phases > 0 && phases <= duration * 1.01, `the phases (${phases} s) fit in the request (${duration} s)`)
  t.equal(value('loom_batch_inference_count{method="prefill"}'), 1, 'one prefill step')
  t.equal(value('loom_batch_inference_count{method="decode"}'), 4, 'then a decode step per further token')
  t.equal(value('loom_batch_inference_success{method="decode"}'), 4)
  t.equal(value('loom_batch_next_size_count'), 5)
  t.equal(value('loom_batch_inference_duration_count{method="decode"}'), 4)
})
