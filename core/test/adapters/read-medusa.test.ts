import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import type { ModelSpec } from '../../src/contracts/step-runner.ts'
import { readMedusaAdapter } from '../../src/adapters/read-medusa.ts'
import { buildMedusaAdapter } from '../engine/medusa-fixtures.ts'

const H = 8
const V = 12
const spec: ModelSpec = {
  architecture: 'LlamaForCausalLM',
  dtype: 'float32',
  device: 'cpu',
  vocabSize: V,
  hiddenSize: H,
  intermediateSize: 16,
  numLayers: 2,
  numHeads: 2,
  numKvHeads: 1,
  headDim: 4,
  maxContextLength: 64,
  kvBlockSize: 4,
  kvBlockCount: 16,
  adapterSlots: 4,
  maxLoraRank: 8,
}
const base = { hiddenSize: H, vocabSize: V, numHeads: 3, blocks: 'random' as const }

t.test('version 2: residual blocks only, the heads reuse the base LM head', async (t) => {
  const dir = t.testdir()
  buildMedusaAdapter(dir, { ...base, numLayers: 2 })
  const w = await readMedusaAdapter(dir, 'org/medusa', spec)
  t.equal(w.kind, 'medusa')
  t.equal(w.key, 'org/medusa')
  t.equal(w.numHeads, 3)
  t.equal(w.numLayers, 2)
  t.equal(w.heads.length, 3)
  for (const head of w.heads) {
    t.equal(head.lmHead, undefined)
    t.equal(head.blocks.length, 2)
    t.equal(head.blocks[0]!.weight.length, H * H)
    t.equal(head.blocks[0]!.bias.length, H)
    t.ok(
      head.blocks[1]!.weight.some((x) => x !== 0),
      'values read',
    )
  }
})

t.test('version 1: per-head LM heads; medusa_head. prefix; model.safetensors', async (t) => {
  const dir = t.testdir()
  const lmHeads = [0, 1, 2].map((h) => Float32Array.from({ length: V * H }, (_, i) => h + i / 1000))
  buildMedusaAdapter(dir, { ...base, lmHeads, prefixed: true, file: 'model.safetensors' })
  const w = await readMedusaAdapter(dir, 'v1', spec)
  t.equal(w.heads.length, 3)
  w.heads.forEach((head, h) => t.same(head.lmHead, lmHeads[h], `head ${h} keeps its own LM head`))
})

t.test('medusa_draft_vocab.json: the ids the heads draft from, sorted', async (t) => {
  const dir = t.testdir()
  buildMedusaAdapter(dir, base)
  t.equal((await readMedusaAdapter(dir, 'm', spec)).draftVocabulary, undefined, 'absent: the whole vocabulary')
  writeFileSync(join(dir, 'medusa_draft_vocab.json'), JSON.stringify({ description: 'x', token_ids: [7, 0, 11, 3] }))
  t.same((await readMedusaAdapter(dir, 'm', spec)).draftVocabulary, Int32Array.of(0, 3, 7, 11))
})

t.test('errors name the adapter and the mismatch', async (t) => {
  const cases: [string, (dir: string) => void, RegExp][] = [
    ['no config', () => undefined, /config\.json is missing/],
    [
      'bad head count',
      (dir) => buildMedusaAdapter(dir, { ...base, config: { medusa_num_heads: 0 } }),
      /medusa_num_heads is 0; expected an integer from 1 to 16/,
    ],
    [
      'no layers field',
      (dir) => buildMedusaAdapter(dir, { ...base, config: { medusa_num_layers: 'one' } }),
      /medusa_num_layers is "one"/,
    ],
    [
      'hidden size',
      (dir) => buildMedusaAdapter(dir, { ...base, config: { hidden_size: 16 } }),
      /hidden_size is 16; the model's is 8/,
    ],
    [
      'vocab size',
      (dir) => buildMedusaAdapter(dir, { ...base, config: { vocab_size: 99 } }),
      /vocab_size is 99; the model's is 12/,
    ],
    [
      'missing tensor',
      (dir) => buildMedusaAdapter(dir, { ...base, omit: ['2.0.linear.bias'] }),
      /tensor 2\.0\.linear\.bias is missing/,
    ],
    [
      'wrong shape',
      (dir) =>
        buildMedusaAdapter(dir, {
          ...base,
          extraTensors: { '1.0.linear.weight': { dtype: 'F32', shape: [H, 4], data: new Float32Array(H * 4) } },
        }),
      /tensor 1\.0\.linear\.weight has shape \[8, 4\]; expected \[8, 8\]/,
    ],
    [
      'some heads with own LM head',
      (dir) =>
        buildMedusaAdapter(dir, {
          ...base,
          extraTensors: { '1.1.weight': { dtype: 'F32', shape: [V, H], data: new Float32Array(V * H) } },
        }),
      /heads 1 have their own LM head/,
    ],
    [
      'more heads than configured',
      (dir) => buildMedusaAdapter(dir, { ...base, config: { medusa_num_heads: 2 } }),
      /tensor 2\.0\.linear\.weight does not belong to 2 heads of 1 layers/,
    ],
    [
      'non-finite',
      (dir) =>
        buildMedusaAdapter(dir, {
          ...base,
          extraTensors: { '0.0.linear.bias': { dtype: 'F32', shape: [H], data: new Float32Array(H).fill(NaN) } },
        }),
      /tensor 0\.0\.linear\.bias holds a non-finite value at index 0/,
    ],
    [
      'no weight file',
      (dir) => writeFileSync(join(dir, 'config.json'), JSON.stringify({ medusa_num_heads: 2, medusa_num_layers: 1 })),
      /no weight file: expected medusa_lm_head\.safetensors or model\.safetensors/,
    ],
    ['config not JSON', (dir) => writeFileSync(join(dir, 'config.json'), '{'), /config\.json is not valid JSON/],
    ...(
      [
        ['draft vocabulary not JSON', '[', /medusa_draft_vocab\.json is not valid JSON/],
        ['draft vocabulary without token_ids', '{"ids": [1]}', /token_ids must be an array of 1 to 12 token ids/],
        ['empty draft vocabulary', '{"token_ids": []}', /token_ids must be an array of 1 to 12 token ids/],
        [
          'draft id past the vocabulary',
          '{"token_ids": [1, 12]}',
          /token_ids\[1\] is 12; expected a token id from 0 to 11/,
        ],
        ['fractional draft id', '{"token_ids": [1.5]}', /token_ids\[0\] is 1\.5/],
        ['draft id twice', '{"token_ids": [4, 2, 4]}', /token id 4 is listed twice/],
      ] as const
    ).map(([name, text, message]): [string, (dir: string) => void, RegExp] => [
      name,
      (dir) => {
        buildMedusaAdapter(dir, base)
        writeFileSync(join(dir, 'medusa_draft_vocab.json'), text)
      },
      message,
    ]),
  ]
  for (const [name, build, message] of cases) {
    await t.test(name, async (t) => {
      const dir = t.testdir()
      build(dir)
      await t.rejects(readMedusaAdapter(dir, 'org/bad', spec), { code: 'adapter_invalid', message })
      await t.rejects(readMedusaAdapter(dir, 'org/bad', spec), { message: /Adapter `org\/bad`/ }, 'names it')
    })
  }
})
