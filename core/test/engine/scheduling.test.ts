import t from 'tap'
import { fakeGreedy, fakeLogits } from './fake-step-runner.ts'
import { collect, finishOf, idsOf, makeRequest, sleep, startEngine, tokensOf } from './engine-fixtures.ts'

const V = 64

t.test('greedy output equals the direct computation; prefill then decode rows', async (t) => {
  const { engine, runner } = await startEngine()
  const events = await collect(engine.submit(makeRequest({ inputIds: [5, 6, 7], maxNewTokens: 6 })))
  t.same(idsOf(events), fakeGreedy([5, 6, 7], -1, V, 6))
  t.equal(finishOf(events).reason, 'length')
  t.ok(finishOf(events).queueMs >= 0)
  t.same(
    runner.batches.map((b) => b.map((r) => r.tokens.length)),
    [[3], [1], [1], [1], [1], [1]],
    'one prefill step, then one decode token per step (the last token is never fed)',
  )
  t.equal(runner.batches[0]![0]!.sampled, true, 'the prompt row samples (at its last position)')
  t.same(runner.violations, [])
  t.same(engine.stats().kvBlocksFree, engine.stats().kvBlocksTotal, 'all blocks back')
  await engine.close()
})

t.test('requests join mid-flight: a step mixes a prefill row and decode rows', async (t) => {
  const { engine, runner } = await startEngine({ stepDelayMs: 2 })
  const first = collect(engine.submit(makeRequest({ inputIds: [1, 2, 3, 4], maxNewTokens: 10 })))
  await sleep(8)
  const second = collect(engine.submit(makeRequest({ inputIds: [9, 8, 7, 6, 5], maxNewTokens: 4 })))
  const [a, b] = await Promise.all([first, second])
  t.same(idsOf(a), fakeGreedy([1, 2, 3, 4], -1, V, 10))
  t.same(idsOf(b), fakeGreedy([9, 8, 7, 6, 5], -1, V, 4))
  const mixed = runner.batches.find(
    (rows) => rows.some((r) => r.tokens.length === 5) && rows.some((r) => r.tokens.length === 1),
  )
  t.ok(mixed, 'a step held the second prompt and the first request’s decode token')
  t.same(runner.violations, [])
  await engine.close()
})

t.test('submits in the same tick share the first step', async (t) => {
  const { engine, runner } = await startEngine()
  const prompts = [[1, 2], [3, 4, 5], [6]]
  const results = await Promise.all(
    prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 3 })))),
  )
  t.equal(runner.batches[0]!.length, 3)
  prompts.forEach((p, i) => t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 3)))
  await engine.close()
})

t.test('long prompts are prefilled in chunks within maxBatchPrefillTokens', async (t) => {
  const { engine, runner } = await startEngine({}, { maxBatchPrefillTokens: 4 })
  const prompt = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
  const events = await collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 3 })))
  t.same(idsOf(events), fakeGreedy(prompt, -1, V, 3))
  const rows = runner.batches.map((b) => b[0]!)
  t.same(
    rows.slice(0, 3).map((r) => [r.cacheLen, r.tokens.length, r.sampled]),
    [
      [0, 4, false],
      [4, 4, false],
      [8, 2, true],
    ],
    'only the last chunk samples',
  )
  for (const batch of runner.batches) {
    const prefill = batch
      .filter((r) => r.cacheLen === 0 || r.tokens.length > 1)
      .reduce((s, r) => s + r.tokens.length, 0)
    t.ok(prefill <= 4, 'prefill budget respected')
  }
  t.same(runner.violations, [])
  await engine.close()
})

t.test('the prefill budget is shared: a second prompt waits for budget, decode rows are not counted', async (t) => {
  const { engine, runner } = await startEngine({}, { maxBatchPrefillTokens: 6 })
  const a = collect(engine.submit(makeRequest({ inputIds: [1, 2, 3, 4], maxNewTokens: 5 })))
  const b = collect(engine.submit(makeRequest({ inputIds: [5, 6, 7, 8], maxNewTokens: 5 })))
  const [ea, eb] = await Promise.all([a, b])
  t.same(idsOf(ea), fakeGreedy([1, 2, 3, 4], -1, V, 5))
  t.same(idsOf(eb), fakeGreedy([5, 6, 7, 8], -1, V, 5))
  t.same(
    runner.batches[0]!.map((r) => r.tokens.length),
    [4, 2],
    'first step: the whole first prompt and a 2-token chunk of the second',
  )
  t.same(runner.batches[1]!.map((r) => r.tokens.length).sort(), [1, 2], 'then a decode row and the rest of the chunk')
  await engine.close()
})

t.test('maxBatchSize bounds the rows of every step', async (t) => {
  const { engine, runner } = await startEngine({}, { maxBatchSize: 2 })
  const prompts = [[1], [2], [3], [4], [5]]
  const results = await Promise.all(
    prompts.map((p) => collect(engine.submit(makeRequest({ inputIds: p, maxNewTokens: 4 })))),
  )
  for (const batch of runner.batches) t.ok(batch.length <= 2)
  prompts.forEach((p, i) => t.same(idsOf(results[i]!), fakeGreedy(p, -1, V, 4)))
  await engine.close()
})

t.test('stop rules: eos, maxNewTokens, context limit', async (t) => {
  const { engine } = await startEngine({ maxContextLength: 256 }, { maxTotalTokens: 10 })
  const prompt = [3, 1, 4, 1, 5]
  const reference = fakeGreedy(prompt, -1, V, 4)
  const eos = reference[2]!
  const firstEos = reference.indexOf(eos)
  const withEos = await collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 4, eosTokenIds: [eos] })))
  t.same(idsOf(withEos), reference.slice(0, firstEos + 1), 'the eos token is streamed, then generation stops')
  t.equal(finishOf(withEos).reason, 'eos_token')

  const byLength = await collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 2 })))
  t.equal(idsOf(byLength).length, 2)
  t.equal(finishOf(byLength).reason, 'length')

  const byContext = await collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 100 })))
  t.equal(idsOf(byContext).length, 5, 'prompt 5 + 5 generated = maxTotalTokens 10')
  t.equal(finishOf(byContext).reason, 'length')
  await engine.close()
})

t.test('prefill logprobs: event order and values, also across chunks', async (t) => {
  for (const budget of [4096, 3]) {
    const { engine } = await startEngine({}, { maxBatchPrefillTokens: budget })
    const prompt = [7, 3, 9, 2, 8, 1, 6]
    const events = await collect(
      engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 2, prefillLogprobs: true })),
    )
    t.same(
      events.map((e) => e.type),
      ['prefill', 'tokens', 'tokens', 'finish'],
      `budget ${budget}`,
    )
    const prefill = events[0]!
    if (prefill.type !== 'prefill') throw new Error('unreachable')
    t.same(prefill.tokens[0], { id: 7, logprob: null })
    t.equal(prefill.tokens.length, prompt.length)
    for (let i = 1; i < prompt.length; i++) {
      const logits = fakeLogits(prompt.slice(0, i), -1, V)
      const lse = Math.log(logits.reduce((s, x) => s + Math.exp(x), 0))
      t.ok(Math.abs(prefill.tokens[i]!.logprob! - (logits[prompt[i]!]! - lse)) < 1e-5, `position ${i}`)
    }
    await engine.close()
  }
})

t.test('chosen-token logprob is the raw log-softmax; top alternatives are the best N, best first', async (t) => {
  const { engine } = await startEngine()
  const prompt = [2, 4, 6]
  const events = await collect(engine.submit(makeRequest({ inputIds: prompt, maxNewTokens: 3, topLogprobs: 3 })))
  const history = [...prompt]
  for (const token of tokensOf(events)) {
    const logits = fakeLogits(history, -1, V)
    const lse = Math.log(logits.reduce((s, x) => s + Math.exp(x), 0))
    t.ok(Math.abs(token.logprob - (logits[token.id]! - lse)) < 1e-5)
    const best = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]!).slice(0, 3)
    t.same(
      token.top!.map((x) => x.id),
      best,
    )
    t.equal(token.top![0]!.id, token.id, 'greedy picks the top alternative')
    t.equal(token.skipped, false)
    history.push(token.id)
  }
  await engine.close()
})
