import { join } from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/** The seed a sampled request without one reports in `details.seed` can be sent back and reproduces the text. */
t.test('a drawn seed round-trips through details.seed', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 6 })
  const test = await startTestServer(join(dir, 'server'), modelDir)
  t.teardown(() => test.close())
  const generate = async (parameters: Record<string, unknown>) => {
    const res = await test.server.app.inject({
      method: 'POST',
      url: '/generate',
      payload: {
        inputs: 'once upon',
        parameters: { max_new_tokens: 12, do_sample: true, details: true, ignore_eos_token: true, ...parameters },
      },
    })
    t.equal(res.statusCode, 200, res.body)
    return res.json() as { generated_text: string; details: { seed: number } }
  }
  for (let i = 0; i < 8; i++) {
    const first = await generate({})
    t.ok(Number.isSafeInteger(first.details.seed) && first.details.seed >= 0, `seed ${first.details.seed} is exact`)
    const again = await generate({ seed: first.details.seed })
    t.equal(again.generated_text, first.generated_text, 'the same text from the reported seed')
    t.equal(again.details.seed, first.details.seed)
  }
})
