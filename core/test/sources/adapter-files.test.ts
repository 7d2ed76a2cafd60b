import t from 'tap'
import { ADAPTER_FILE_NAMES, hasAdapterConfig, pickAdapterFiles } from '@loom/core'

t.test('a LoRA: config and safetensors, never the .bin twin; tokenizer files come along', async (t) => {
  t.same(
    pickAdapterFiles([
      'README.md',
      'adapter_model.bin',
      'tokenizer.json',
      'adapter_model.safetensors',
      'adapter_config.json',
      'training_args.bin',
      'special_tokens_map.json',
    ]),
    {
      files: ['adapter_config.json', 'adapter_model.safetensors', 'tokenizer.json', 'special_tokens_map.json'],
      lora: true,
      medusa: false,
    },
  )
  t.same(pickAdapterFiles(['adapter_config.json', 'adapter_model.bin']), {
    files: ['adapter_config.json', 'adapter_model.bin'],
    lora: true,
    medusa: false,
  })
})

t.test('Medusa detection', async (t) => {
  t.same(
    pickAdapterFiles(['config.json', 'model.safetensors', 'medusa_lm_head.safetensors']),
    { files: ['config.json', 'medusa_lm_head.safetensors'], lora: false, medusa: true },
    'medusa_lm_head.safetensors is preferred',
  )
  t.same(pickAdapterFiles(['config.json', 'model.safetensors']), {
    files: ['config.json', 'model.safetensors'],
    lora: false,
    medusa: true,
  })
  t.match(
    pickAdapterFiles(['config.json', 'medusa_lm_head.bin']),
    { problem: 'no_medusa_weights' },
    'the Medusa reader does not read .bin heads',
  )
  t.same(
    pickAdapterFiles(['adapter_config.json', 'adapter_model.safetensors', 'config.json', 'medusa_lm_head.safetensors']),
    {
      files: ['adapter_config.json', 'adapter_model.safetensors', 'config.json', 'medusa_lm_head.safetensors'],
      lora: true,
      medusa: true,
    },
    'a LoRA with a Medusa head',
  )
  t.same(
    pickAdapterFiles(['adapter_config.json', 'adapter_model.safetensors', 'config.json', 'model.safetensors']),
    { files: ['adapter_config.json', 'adapter_model.safetensors', 'config.json'], lora: true, medusa: false },
    'model.safetensors next to a LoRA is a merged model, not Medusa heads',
  )
  t.same(
    pickAdapterFiles(['adapter_config.json', 'config.json', 'medusa_lm_head.safetensors']),
    { files: ['adapter_config.json', 'config.json', 'medusa_lm_head.safetensors'], lora: true, medusa: true },
    'either part may bring the weights',
  )
  t.same(
    pickAdapterFiles(['medusa_draft_vocab.json', 'medusa_lm_head.safetensors', 'config.json']),
    { files: ['config.json', 'medusa_lm_head.safetensors', 'medusa_draft_vocab.json'], lora: false, medusa: true },
    "the heads' draft vocabulary comes with their weights",
  )
  t.same(
    pickAdapterFiles(['adapter_config.json', 'adapter_model.safetensors', 'config.json', 'medusa_draft_vocab.json']),
    { files: ['adapter_config.json', 'adapter_model.safetensors', 'config.json'], lora: true, medusa: false },
    'but not without them',
  )
})

t.test('folders that are not adapters say why', async (t) => {
  t.match(pickAdapterFiles(['README.md', 'model.safetensors']), {
    problem: 'no_config',
    detail: 'neither adapter_config.json (LoRA) nor config.json (Medusa) is in the folder',
  })
  t.match(pickAdapterFiles([]), { problem: 'no_config' })
  t.match(pickAdapterFiles(['adapter_config.json', 'tokenizer.json']), {
    problem: 'no_lora_weights',
    detail: 'adapter_config.json is there but neither adapter_model.safetensors nor adapter_model.bin',
  })
  t.match(pickAdapterFiles(['config.json', 'pytorch_model.bin']), {
    problem: 'no_medusa_weights',
    detail: 'config.json is there but no Medusa weights (medusa_lm_head.safetensors)',
  })
})

t.test('the names and the marker check', async (t) => {
  t.equal(new Set(ADAPTER_FILE_NAMES).size, ADAPTER_FILE_NAMES.length, 'no name twice')
  const everything = pickAdapterFiles(ADAPTER_FILE_NAMES)
  t.ok(
    'files' in everything &&
      everything.files.every(
        (f, i, all) => i === 0 || ADAPTER_FILE_NAMES.indexOf(all[i - 1]!) < ADAPTER_FILE_NAMES.indexOf(f),
      ),
    'picked files keep the list order',
  )
  t.ok(hasAdapterConfig(['x', 'adapter_config.json']))
  t.ok(hasAdapterConfig(new Set(['config.json'])))
  t.notOk(hasAdapterConfig(['adapter_model.safetensors', 'tokenizer.json']))
})
