import { join } from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/**
 * A prompt that cannot fit is refused without tokenizing it all (tokenizing runs on the event
 * loop: ~1.5 s for 1 MB); with `truncate` it is still tokenized and cut.
 */
t.test('an obviously over-long prompt is refused before tokenizing', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  await buildModel(modelDir, { hiddenSize: 64, numLayers: 2, seed: 2 })
  const test = await startTestServer(join(dir, 'server'), modelDir)
  t.teardown(() => test.close())
  const generate = (inputs: string, parameters: Record<string, unknown> = {}) =>
    test.server.app.inject({
      method: 'POST',
      url: '/generate',
      payload: { inputs, parameters: { max_new_tokens: 2, ...parameters } },
    })
  const huge = 'ab'.repeat(250_000)
  const refused = await generate(huge)
  t.equal(refused.statusCode, 422)
  t.match(refused.json(), {
    error:
      /^Input validation error: `inputs` must be at most \d+ tokens long \(set `parameters.truncate` to keep the last tokens\); received at least \d+ \(500000 characters\)$/,
  })
  const truncated = await generate(huge, { truncate: 50 })
  t.equal(truncated.statusCode, 200, 'with truncate the text is tokenized and cut')
  const justOver = await generate('ab '.repeat(300))
  t.equal(justOver.statusCode, 422)
  t.match(justOver.json(), { error: /received \d+$/ }, 'near the limit: tokenized, the exact count reported')
})
