import { join } from 'node:path'
import t from 'tap'
import { NativeStepRunner } from '@loom/backend-cuda-native'
import { buildLoraAdapter, buildModel, ReferenceModel, SeededRandom } from '@loom/testkit'
import type { AdapterHandle, LocalAdapter } from '../../src/contracts/adapter.ts'
import type { SamplingParams } from '../../src/contracts/sampling.ts'
import { readLoraAdapter } from '../../src/adapters/read-lora.ts'
import { readMedusaAdapter } from '../../src/adapters/read-medusa.ts'
import { BatchingEngine } from '../../src/engine/batching-engine.ts'
import type { ReadAdapter } from '../../src/engine/adapter-registry.ts'
import {
  collect,
  FakeConstraint,
  GREEDY,
  idsOf,
  makeRequest,
  silentLogger,
  TestConstraints,
  tokensOf,
} from './engine-fixtures.ts'
import { buildMedusaAdapter } from './medusa-fixtures.ts'

/**
 * Acceptance 1 (issue 7) on the real native runner: greedy output with Medusa equals greedy
 * output without, token for token, for 50 prompts in mixed batches of base and LoRA rows — with
 * heads that copy the base LM head (the Medusa paper's initialisation: many candidates accepted)
 * and with random heads (few accepted). Seeded sampling with Medusa repeats and matches plain
 * seeded sampling.
 */

const readAdapter: ReadAdapter = (adapter, spec) =>
  adapter.kind === 'lora'
    ? readLoraAdapter(adapter.dir, adapter.resolved.id, spec)
    : readMedusaAdapter(adapter.dir, adapter.resolved.id, spec)

const local = (dir: string, id: string, kind: 'lora' | 'medusa'): LocalAdapter => ({
  resolved: { source: 'local', id, revision: 'r1', files: [] },
  dir: join(dir, id),
  kind,
})

t.test('native runner: Medusa is lossless for greedy in mixed base/LoRA batches', async (t) => {
  const dir = t.testdir()
  const modelDir = join(dir, 'model')
  const config = await buildModel(modelDir, { arch: 'llama', hiddenSize: 64, numLayers: 2, seed: 21 })
  for (const [i, id] of ['lora-a', 'lora-b'].entries()) {
    await buildLoraAdapter(join(dir, id), { model: config, rank: 8, seed: 40 + i, initScale: 0.5 })
  }
  const H = config.hidden_size
  const V = config.vocab_size
  const ref = await ReferenceModel.load(modelDir)
  const lmHead = Float32Array.from(ref.weight('lm_head.weight'))
  // Paper initialisation: zero residual blocks, own LM head = the base one (version 1).
  buildMedusaAdapter(join(dir, 'copy-heads'), {
    hiddenSize: H,
    vocabSize: V,
    numHeads: 4,
    lmHeads: [lmHead, lmHead, lmHead, lmHead],
  })
  // Random residual blocks over the base LM head (version 2).
  buildMedusaAdapter(join(dir, 'random-heads'), {
    hiddenSize: H,
    vocabSize: V,
    numHeads: 4,
    blocks: 'random',
    scale: 4,
    seed: 5,
  })

  const constraints = new TestConstraints()
  const runner = new NativeStepRunner(modelDir, { threads: 2, kv_cache_tokens: 8192, kv_block_size: 16 })
  const engine = new BatchingEngine({
    runner,
    limits: { maxBatchSize: 16, maxBatchPrefillTokens: 512, maxConcurrentRequests: 256 },
    readAdapter,
    logger: silentLogger,
    name: 'native',
    // Acceptance per step is compared between head kinds below: both need the same (full) tree,
    // not whatever the adaptive policy picks from this machine's step times.
    speculation: { adaptive: false },
    constraints: () => constraints,
  })
  t.teardown(() => engine.close())
  await engine.start()
  const loras = [
    await engine.loadAdapter(local(dir, 'lora-a', 'lora')),
    await engine.loadAdapter(local(dir, 'lora-b', 'lora')),
  ]
  const heads = {
    copy: await engine.loadAdapter(local(dir, 'copy-heads', 'medusa')),
    random: await engine.loadAdapter(local(dir, 'random-heads', 'medusa')),
  }
  t.equal(heads.copy.kind, 'medusa')
  t.equal(heads.copy.size, 4)

  const rng = new SeededRandom(77)
  const prompts = Array.from({ length: 50 }, () =>
    Array.from({ length: 3 + Math.floor(rng.next() * 10) }, () => 3 + Math.floor(rng.next() * (V - 3))),
  )
  const adapterOf = (i: number): AdapterHandle | null => (i % 3 === 0 ? null : loras[i % 2]!)
  const run = async (speculatorOf: (i: number) => AdapterHandle | null, sampling: SamplingParams = GREEDY) => {
    const events = await Promise.all(
      prompts.map((inputIds, i) =>
        collect(
          engine.submit(
            makeRequest({ inputIds, maxNewTokens: 24, adapter: adapterOf(i), speculator: speculatorOf(i), sampling }),
          ),
        ),
      ),
    )
    return events
  }
  const plain = (await run(() => null)).map(idsOf)
  t.ok(new Set(plain.map((ids) => ids.join())).size > 40, 'the prompts give different outputs')

  const rates: Partial<Record<'copy' | 'random', number>> = {}
  for (const kind of ['copy', 'random'] as const) {
    const before = engine.speculationStats()
    // Every fifth request decodes plainly in the same batches.
    const events = await run((i) => (i % 5 === 4 ? null : heads[kind]))
    const ids = events.map(idsOf)
    let same = 0
    ids.forEach((got, i) => {
      if (got.join() === plain[i]!.join()) same++
      else t.same(got, plain[i], `${kind} heads: prompt ${i} (${adapterOf(i)?.key ?? 'base'})`)
    })
    t.equal(same, 50, `${kind} heads: 50 of 50 outputs identical to plain greedy`)
    const after = engine.speculationStats()
    const steps = after.verifySteps - before.verifySteps
    const accepted = after.acceptedTokens - before.acceptedTokens
    const skipped = events.reduce((n, e) => n + tokensOf(e).filter((tok) => tok.skipped).length, 0)
    t.equal(skipped, accepted, 'skipped tokens are the accepted candidates')
    t.ok(steps > 0, `${kind} heads verified ${steps} trees`)
    t.comment(
      `${kind} heads: ${steps} verifications, ${accepted} accepted (${(accepted / steps).toFixed(2)} per step); per head ${after.heads
        .map(
          (h, i) => `${h.accepted - (before.heads[i]?.accepted ?? 0)}/${h.proposed - (before.heads[i]?.proposed ?? 0)}`,
        )
        .join(' ')}`,
    )
    rates[kind] = accepted / steps
  }
  // Copied LM heads propose the most likely tokens after the current one; on a random model they
  // hit now and then, random heads almost never.
  t.ok(rates.copy! > 0.05 && rates.copy! > rates.random!, `copied heads accept more (${rates.copy} vs ${rates.random})`)

  // Seeded sampling: reproducible, and identical to plain seeded sampling (sample-and-match).
  const sampling: SamplingParams = { ...GREEDY, temperature: 0.7, topK: 20, seed: 1234n }
  const seeded = (await run((i) => (i % 5 === 4 ? null : heads.copy), sampling)).map(idsOf)
  const again = (await run((i) => (i % 5 === 4 ? null : heads.copy), sampling)).map(idsOf)
  const plainSampled = (await run(() => null, sampling)).map(idsOf)
  t.same(again, seeded, 'seeded sampling with Medusa is reproducible')
  t.same(seeded, plainSampled, 'and gives the tokens plain seeded sampling gives')

  // On the device, each tree node is sampled with the draws, penalty history (the path's tokens
  // added) and grammar mask it would have had, had the walk reached it: penalised and
  // constrained sampling with Medusa give the plain tokens too.
  const penalised: SamplingParams = {
    ...sampling,
    temperature: 0.5,
    repetitionPenalty: 1.3,
    frequencyPenalty: 0.4,
    presencePenalty: 0.2,
    seed: 99n,
  }
  const acceptedBefore = engine.speculationStats().acceptedTokens
  const withPenalties = (await run((i) => (i % 5 === 4 ? null : heads.copy), penalised)).map(idsOf)
  const acceptedPenalised = engine.speculationStats().acceptedTokens - acceptedBefore
  t.ok(acceptedPenalised > 20, `penalised rows accepted candidates (${acceptedPenalised}): deep nodes were used`)
  t.same(withPenalties, (await run(() => null, penalised)).map(idsOf), 'penalised sampling: the plain tokens')
  const constrained = async (speculator: AdapterHandle | null, sampled: SamplingParams) =>
    Promise.all(
      prompts.slice(0, 20).map(async (inputIds) => {
        const constraint = new FakeConstraint(V, (id) => id % 2 === 0, 10)
        const grammar = constraints.grammarFor(constraint)
        const events = await collect(
          engine.submit(
            makeRequest({ inputIds, maxNewTokens: 16, eosTokenIds: [V - 2], grammar, speculator, sampling: sampled }),
          ),
        )
        return { ids: idsOf(events), accepted: constraint.accepted }
      }),
    )
  for (const sampled of [GREEDY, penalised]) {
    const before = engine.speculationStats().acceptedTokens
    const spec = await constrained(heads.copy, sampled)
    t.ok(engine.speculationStats().acceptedTokens > before, 'constrained rows accepted candidates')
    t.same(spec, await constrained(null, sampled), `grammar, temperature ${sampled.temperature}: the plain tokens`)
    t.ok(
      spec.every(({ ids }) => ids.slice(0, 10).every((id) => id % 2 === 0)),
      'the grammar held: even ids until it terminated',
    )
  }
})
