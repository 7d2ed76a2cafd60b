import { join } from 'node:path'
import t from 'tap'
import { buildLoraAdapter, buildModel } from '@loom/testkit'
import { startTestServer } from './test-server.ts'

/**
 * Acceptance (issue 3): mixed batches over HTTP. Eight concurrent greedy requests — six distinct
 * adapters of ranks 4..128 and two base rows — produce exactly the tokens each produces alone;
 * a seeded sampled request gives the same text alone and inside a batch of 16.
 */
t.test('mixed-adapter batches give each request its solo output', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, {
    arch: 'llama',
    hiddenSize: 64,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    seed: 11,
  })
  const ranks = [4, 8, 16, 32, 64, 128]
  for (const [i, rank] of ranks.entries()) {
    await buildLoraAdapter(join(modelDir, 'adapters', `r${rank}`), {
      model: config,
      rank,
      alpha: rank * 2,
      seed: 100 + i,
      targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
      initScale: 0.5,
    })
  }
  const test = await startTestServer(join(dir, 'server'), modelDir, { adapterRoot: join(modelDir, 'adapters') })
  t.teardown(() => test.close())
  const app = test.server.app

  const generate = async (inputs: string, parameters: Record<string, unknown>) => {
    const res = await app.inject({
      method: 'POST',
      url: '/generate',
      payload: { inputs, parameters: { details: true, ...parameters } },
    })
    if (res.statusCode !== 200) t.fail(`HTTP ${res.statusCode}: ${res.body}`)
    const body = res.json() as { generated_text: string; details: { tokens: { id: number; logprob: number }[] } }
    return {
      text: body.generated_text,
      ids: body.details.tokens.map((tok) => tok.id),
      logprobs: body.details.tokens.map((tok) => tok.logprob),
    }
  }

  const requests = [
    ...ranks.map((rank, i) => ({
      inputs: `Request ${i} to rank ${rank}`,
      parameters: { adapter_id: `r${rank}`, max_new_tokens: 12 },
    })),
    { inputs: 'A base row', parameters: { max_new_tokens: 12 } },
    { inputs: 'Another base row, longer than the first one', parameters: { max_new_tokens: 12 } },
  ]
  const alone = []
  for (const r of requests) alone.push(await generate(r.inputs, r.parameters))
  const together = await Promise.all(requests.map((r) => generate(r.inputs, r.parameters)))
  for (const [i, r] of requests.entries()) {
    t.same(
      together[i]!.ids,
      alone[i]!.ids,
      `${(r.parameters as { adapter_id?: string }).adapter_id ?? 'base'}: batched tokens equal solo tokens`,
    )
    t.equal(together[i]!.ids.length, 12)
    // The cpu device computes a row's logits the same bits whatever shares its step (backend
    // README, "Same bits alone, batched and speculated"), so the logprobs match exactly too.
    t.strictSame(together[i]!.logprobs, alone[i]!.logprobs, 'batched logprobs equal solo ones, bit for bit')
  }
  // The adapters must actually change the output, or the comparison above proves little.
  const distinct = new Set(alone.slice(0, 6).map((a) => a.ids.join(',')))
  t.equal(distinct.size, 6, 'every adapter produces its own continuation')
  const sameBase = await generate(requests[0]!.inputs, { max_new_tokens: 12 })
  t.not(sameBase.ids.join(','), alone[0]!.ids.join(','), 'the rank-4 adapter differs from the base model')

  // Seeded sampling: a request's output depends only on its seed.
  const sampled = { adapter_id: 'r16', max_new_tokens: 16, do_sample: true, temperature: 0.9, top_p: 0.95, seed: 1234 }
  const solo = await generate('Once upon a time', sampled)
  const crowd = await Promise.all([
    generate('Once upon a time', sampled),
    ...Array.from({ length: 15 }, (_, i) =>
      generate(`noise ${i}`, {
        max_new_tokens: 8 + i,
        do_sample: true,
        seed: i,
        ...(i % 3 === 0 ? {} : { adapter_id: `r${ranks[i % ranks.length]}` }),
      }),
    ),
  ])
  t.same(crowd[0]!.ids, solo.ids, 'same seed: same tokens alone and in a batch of 16')
  t.strictSame(crowd[0]!.logprobs, solo.logprobs, 'and the same logprobs, bit for bit')
  t.equal(crowd[0]!.text, solo.text)
  const otherSeed = await generate('Once upon a time', { ...sampled, seed: 4321 })
  t.not(otherSeed.ids.join(','), solo.ids.join(','), 'another seed samples differently')
})
