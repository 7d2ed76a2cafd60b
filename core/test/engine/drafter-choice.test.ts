import t, { type Test } from 'tap'
import type { BackendRequest } from '../../src/contracts/backend.ts'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { DrafterChoice } from '../../src/engine/medusa/drafter-choice.ts'
import { collect, GREEDY, idsOf, localAdapter, localMedusa, makeRequest, startEngine } from './engine-fixtures.ts'

const options = { maxKeys: 2, warmup: 2, exploreEvery: 4, maxExploreEvery: 16, decisive: 1.5, decay: 0.8 }

t.test('warm-up tries both drafters, then the faster one is used and the other tried', async (t) => {
  const choice = new DrafterChoice(options)
  const warm = [0, 1, 2, 3].map(() => choice.choose('base|heads'))
  t.same(warm, ['medusa', 'prompt-lookup', 'prompt-lookup', 'medusa'], 'two admissions each, in Thue-Morse order')
  const eight = new DrafterChoice({ ...options, warmup: 4 })
  const order = Array.from({ length: 8 }, () => eight.choose('k'))
  // Over a cycle of 4 prompts (admission i gets prompt i % 4), each drafter sees all four.
  const promptsOf = (d: string) => order.flatMap((x, i) => (x === d ? [i % 4] : [])).sort()
  t.same(promptsOf('medusa'), [0, 1, 2, 3], 'heads try every prompt of a 4-cycle')
  t.same(promptsOf('prompt-lookup'), [0, 1, 2, 3], 'and so does lookup')
  t.equal(choice.preferredFor('base|heads'), 'medusa', 'heads until both have finished requests')
  choice.record('base|heads', 'medusa', 50, 100) // 0.5 tokens/ms
  choice.record('base|heads', 'prompt-lookup', 90, 100) // 0.9 tokens/ms
  t.equal(choice.preferredFor('base|heads'), 'prompt-lookup')
  // Admissions 4..12: lookup, and the heads tried 4 admissions after the warm-up.
  const next = Array.from({ length: 9 }, () => choice.choose('base|heads'))
  t.same(next.join(' '), 'L L L L H L L L H'.replace(/L/g, 'prompt-lookup').replace(/H/g, 'medusa'))
  // The heads get faster (older requests weigh 0.8 per new one): the choice follows.
  for (let i = 0; i < 6; i++) choice.record('base|heads', 'medusa', 200, 100)
  t.equal(choice.preferredFor('base|heads'), 'medusa', `speeds ${JSON.stringify(choice.speeds('base|heads'))}`)
})

t.test('a clear difference ends the warm-up early; tries that confirm the choice come ever later', async (t) => {
  const choice = new DrafterChoice({ ...options, warmup: 4 })
  const letter = (d: string) => (d === 'medusa' ? 'H' : 'L')
  const admit = () => letter(choice.choose('k'))
  // Sequential traffic: each request finishes before the next arrives. Lookup delivers twice the heads' speed.
  const finish = (d: string) => choice.record('k', d === 'H' ? 'medusa' : 'prompt-lookup', d === 'H' ? 50 : 100, 100)
  const seen: string[] = []
  for (let i = 0; i < 60; i++) {
    const d = admit()
    seen.push(d)
    finish(d)
  }
  const text = seen.join('')
  t.equal(text.slice(0, 4), 'HLLH', 'two requests each')
  t.equal(text.slice(4, 8), 'LLLL', 'then lookup at once: 2x is decisive (warm-up would have run 8)')
  // Tries of the heads 4 admissions after the warm-up, then 4, 8, 16 and 16 (maxExploreEvery)
  // after each other: each try's stretch is set when it is admitted, before its result doubles it.
  const tries = [...text.matchAll(/H/g)].map((m) => m.index).slice(2)
  t.same(tries, [8, 12, 20, 36, 52], `heads tried at ${tries.join(', ')} in ${text}`)

  // A difference below `decisive` runs the whole warm-up.
  const close = new DrafterChoice({ ...options, warmup: 4 })
  const order: string[] = []
  for (let i = 0; i < 8; i++) {
    const d = letter(close.choose('k'))
    order.push(d)
    close.record('k', d === 'H' ? 'medusa' : 'prompt-lookup', d === 'H' ? 80 : 100, 100)
  }
  t.equal(order.join(''), 'HLLHLHHL', '1.25x is not decisive at 1.5: all 8 warm-up admissions')

  // A try that changes the preference brings the next try back to `exploreEvery`.
  const flip = new DrafterChoice(options)
  const log: string[] = []
  let headsSpeed = 50
  for (let i = 0; i < 40; i++) {
    const d = letter(flip.choose('k'))
    log.push(d)
    if (i === 20) headsSpeed = 400 // the traffic changes: heads now draft far better
    flip.record('k', d === 'H' ? 'medusa' : 'prompt-lookup', d === 'H' ? headsSpeed : 100, 100)
  }
  const after = log.join('').slice(21)
  t.match(after, /^L*H+/, `the next try of the heads switches to them (${log.join('')})`)
  t.equal(flip.preferredFor('k'), 'medusa')
  const lookupTries = [...log.join('').slice(21).matchAll(/L/g)].map((m) => m.index! + 21)
  t.ok(lookupTries.length >= 2, `lookup tried again soon after the switch (at ${lookupTries.join(', ')})`)
})

t.test('each key learns alone, and memory stays bounded', async (t) => {
  const choice = new DrafterChoice(options)
  for (const key of ['base|heads', 'kjv|heads']) for (let i = 0; i < 4; i++) choice.choose(key)
  choice.record('kjv|heads', 'medusa', 10, 100)
  choice.record('kjv|heads', 'prompt-lookup', 90, 100)
  t.equal(choice.preferredFor('kjv|heads'), 'prompt-lookup')
  t.equal(choice.preferredFor('base|heads'), 'medusa', "kjv's requests do not move base's choice")
  t.same(choice.speeds('base|heads'), { medusa: NaN, lookup: NaN }, 'base has measured nothing yet')
  // A third key forgets the least recently used one (base): its next admissions start over.
  choice.choose('devil|heads')
  t.equal(choice.preferredFor('base|heads'), null, 'forgotten')
  t.equal(choice.preferredFor('kjv|heads'), 'prompt-lookup', 'the recently used key stays')
  choice.record('base|heads', 'prompt-lookup', 90, 100)
  t.equal(choice.preferredFor('base|heads'), null, 'a forgotten key records nothing')
  t.equal(choice.choose('base|heads'), 'medusa', 'and warms up again')
})

t.test('requests too short to time are not counted; options are checked', async (t) => {
  const choice = new DrafterChoice(options)
  for (let i = 0; i < 4; i++) choice.choose('k')
  choice.record('k', 'medusa', 1, 100)
  choice.record('k', 'prompt-lookup', 40, 0)
  t.same(choice.speeds('k'), { medusa: NaN, lookup: NaN })
  t.throws(() => new DrafterChoice({ ...options, exploreEvery: 1 }), /exploreEvery/)
  t.throws(() => new DrafterChoice({ ...options, maxExploreEvery: 3 }), /maxExploreEvery/)
  t.throws(() => new DrafterChoice({ ...options, decisive: 0.5 }), /decisive/)
  t.throws(() => new DrafterChoice({ ...options, decay: 0 }), /decay/)
  t.throws(() => new DrafterChoice({ ...options, maxKeys: 0 }), /maxKeys/)
})

/**
 * The engine with prompt lookup on and requests that have heads, sent one at a time. The clock
 * is virtual: a step costs 1 ms, or `headsStepMs` when a row of it runs heads, so the measured
 * decode speeds (and so the choice) are the test's to set. The tree policy is off (it times steps
 * by the real clock), so every draft is verified.
 */
async function serveWithHeads(
  t: Test,
  drafterChoice: 'learned' | 'heads' | undefined,
  headsStepMs: number,
  sampling: SamplingParams = GREEDY,
) {
  let clock = 0
  const { engine, runner } = await startEngine(
    {
      medusaAccuracy: [0.6, 0.4, 0.2, 0.1],
      beforeStep: (batch) => {
        clock += batch.rows.some((row) => row.medusaSlot >= 0) ? headsStepMs : 1
      },
    },
    {},
    undefined,
    {
      // adaptive off: every draft is verified, so each sequence's rows show its drafter.
      speculation: {
        adaptive: false,
        promptLookup: { ngramSize: 3, draftTokens: 4 },
        ...(drafterChoice ? { drafterChoice } : {}),
      },
      now: () => clock,
    },
  )
  const medusa = await engine.loadAdapter(localMedusa('heads'))
  const kjv = await engine.loadAdapter(localAdapter('kjv'))
  const outputs: number[][] = []
  const requests: BackendRequest[] = []
  for (let i = 0; i < 14; i++) {
    const request = makeRequest({
      inputIds: [1, 2, 3, 4 + (i % 5), 1, 2, 3, 5, 6, 1, 2, 3],
      maxNewTokens: 24,
      adapter: i >= 12 ? kjv : null, // the last two: another key
      speculator: medusa,
      sampling,
    })
    requests.push(request)
    outputs.push(idsOf(await collect(engine.submit(request))))
  }
  t.same(runner.violations, [], 'positions, masks and cache reads consistent')
  // Each sequence's drafter, as its rows show it: heads asked for, or trees verified without heads.
  const bySeq = new Map<number, 'heads' | 'lookup' | 'plain'>()
  for (const row of runner.batches.flat()) {
    const was = bySeq.get(row.seqId) ?? 'plain'
    if (row.medusaSlot >= 0) bySeq.set(row.seqId, 'heads')
    else if (row.treeMask !== null && was === 'plain') bySeq.set(row.seqId, 'lookup')
    else bySeq.set(row.seqId, was)
  }
  const drafters = [...bySeq.keys()].sort((a, b) => a - b).map((id) => bySeq.get(id)!)
  await engine.close()
  return { outputs, drafters }
}

t.test('in the engine: the faster drafter per key, outputs unchanged', async (t) => {
  const plain = await serveWithHeads(t, 'heads', 1)
  t.ok(
    plain.drafters.every((d) => d !== 'lookup'),
    `drafter_choice heads: every request with heads drafts by its heads (${plain.drafters.join(' ')})`,
  )
  // Heads cost 3x a step here: the choice must move base requests to prompt lookup.
  const learned = await serveWithHeads(t, 'learned', 3)
  learned.outputs.forEach((ids, i) => t.same(ids, plain.outputs[i], `request ${i}: same tokens either way`))
  const base = learned.drafters.slice(0, 12)
  t.same(
    base.slice(0, 4),
    ['heads', 'lookup', 'lookup', 'heads'],
    'warm-up: two requests with each, in Thue-Morse order',
  )
  // Lookup decodes far faster than heads here: decisive, so the warm-up's other four go to it, and
  // the first try of the heads comes 8 admissions (exploreEvery) later, past these 12.
  t.same(base.slice(4), Array(8).fill('lookup'), `then prompt lookup (admissions 5-12: ${base.join(' ')})`)
  // kjv with the same heads is another key: it warms up on its own, heads first.
  t.same(learned.drafters.slice(12), ['heads', 'lookup'], "kjv's first requests: its own warm-up")
})

t.test('in the engine: sampled requests stay the same whichever drafter runs', async (t) => {
  const sampled = { ...GREEDY, temperature: 0.8, topK: 8, seed: 11n }
  const heads = await serveWithHeads(t, 'heads', 1, sampled)
  const learned = await serveWithHeads(t, 'learned', 3, sampled)
  learned.outputs.forEach((ids, i) => t.same(ids, heads.outputs[i], `request ${i}: same tokens`))
  t.ok(learned.drafters.includes('lookup'), `some ran prompt lookup (${learned.drafters.join(' ')})`)
})
