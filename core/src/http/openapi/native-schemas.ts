import { DEFAULT_DENSITY, MAJORITY_SIGN_METHODS, MERGE_STRATEGIES } from '../../adapters/merge/merge-params.ts'
import { MAX_ADAPTER_ID_LENGTH, MAX_SOURCE_NAME_LENGTH } from '../../validation/fields.ts'
import { nullable, ref, type JsonSchema } from './json-schema.ts'

/**
 * The native (LoRAX) API's shapes, as `components.schemas` of the OpenAPI document. Request
 * schemas describe what `parse-generate-body.ts` accepts (it, not these, validates requests);
 * response schemas describe what `native-routes.ts` writes. `examples` are real answers of the
 * demo model (`npm start`).
 */

const integer = (description: string, extra: JsonSchema = {}): JsonSchema => ({
  type: 'integer',
  description,
  ...extra,
})

/** `merged_adapters`, shared by the native parameters and the v1 extension field. */
export const MergedAdapters: JsonSchema = {
  type: 'object',
  description: 'Merge several LoRA adapters for this request (computed once per merge, then cached).',
  required: ['ids'],
  additionalProperties: false,
  properties: {
    ids: { type: 'array', items: { type: 'string' }, minItems: 1, description: 'The adapters to merge.' },
    weights: nullable({ type: 'array', items: { type: 'number' }, description: 'One weight per id; default 1 each.' }),
    merge_strategy: nullable({ type: 'string', enum: [...MERGE_STRATEGIES], default: 'linear' }),
    density: nullable({ type: 'number', minimum: 0, maximum: 1, default: DEFAULT_DENSITY }),
    majority_sign_method: nullable({ type: 'string', enum: [...MAJORITY_SIGN_METHODS], default: 'total' }),
    seed: nullable(integer('Seed of the `dare_*` random masks.', { minimum: 0, maximum: 0xffffffff })),
  },
  examples: [{ ids: ['kjv', 'devil'], weights: [0.7, 0.3], merge_strategy: 'linear' }],
}

/** `response_format`, shared by the native parameters and `/v1/chat/completions`. */
export const ResponseFormat: JsonSchema = {
  type: 'object',
  description:
    'Constrain the output: `text` (no constraint), `json_object` (any JSON object, or `schema`), or `json_schema` ' +
    '(OpenAI: `json_schema: {name, schema, strict}`; LoRAX: `schema`). `whitespace` (a Loom extension) picks ' +
    'compact or flexible whitespace between JSON tokens.',
  required: ['type'],
  properties: {
    type: { type: 'string', enum: ['text', 'json_object', 'json_schema'] },
    schema: nullable({ type: 'object', description: 'A JSON Schema (LoRAX form).' }),
    json_schema: {
      type: 'object',
      properties: {
        name: { type: 'string', pattern: '^[a-zA-Z0-9_-]{1,64}$' },
        schema: { type: 'object' },
        strict: nullable({ type: 'boolean' }),
      },
    },
    whitespace: nullable({ type: 'string', enum: ['compact', 'flexible'] }),
  },
  examples: [{ type: 'json_object', schema: { type: 'object', properties: { name: { type: 'string' } } } }],
}

export const GenerateParameters: JsonSchema = {
  type: 'object',
  description:
    'LoRAX generation parameters. Limits that depend on the server (`max_total_tokens`, `max_stop_sequences`, ' +
    '`max_input_length`) are in `GET /info`. Unknown keys are refused (422).',
  additionalProperties: false,
  properties: {
    adapter_id: nullable({
      type: 'string',
      maxLength: MAX_ADAPTER_ID_LENGTH,
      description: 'A LoRA or Medusa adapter; empty or absent: the base model.',
    }),
    adapter_source: nullable({
      type: 'string',
      maxLength: MAX_SOURCE_NAME_LENGTH,
      description: 'Where `adapter_id` comes from (`hub`, `local`, `s3`, `pbase`, …); default: the server default.',
    }),
    api_token: nullable({ type: 'string', description: "The adapter's token (else `Authorization: Bearer`)." }),
    merged_adapters: nullable(ref('MergedAdapters')),
    best_of: { enum: [1, null], description: 'Only 1 (the default) is supported.' },
    temperature: nullable({ type: 'number', minimum: 0, maximum: 100 }),
    repetition_penalty: nullable({ type: 'number', exclusiveMinimum: 0, default: 1 }),
    frequency_penalty: nullable({ type: 'number', minimum: -2, maximum: 2, default: 0 }),
    presence_penalty: nullable({ type: 'number', minimum: -2, maximum: 2, default: 0 }),
    top_k: nullable(integer('Sample among the k most likely tokens.', { minimum: 1 })),
    top_p: nullable({ type: 'number', exclusiveMinimum: 0, maximum: 1 }),
    typical_p: nullable({ type: 'number', exclusiveMinimum: 0, maximum: 1 }),
    do_sample: nullable({ type: 'boolean', default: false }),
    max_new_tokens: nullable(integer('At most `max_total_tokens`.', { minimum: 1 })),
    ignore_eos_token: nullable({ type: 'boolean', default: false }),
    return_full_text: nullable({ type: 'boolean', default: false }),
    stop: nullable({
      description: 'Stop sequences: a string or at most `max_stop_sequences` strings.',
      anyOf: [
        { type: 'string', minLength: 1 },
        { type: 'array', items: { type: 'string', minLength: 1 } },
      ],
    }),
    truncate: nullable(integer('Keep only the last `truncate` prompt tokens.', { minimum: 1 })),
    watermark: { enum: [false, null], description: 'Not supported.' },
    details: nullable({ type: 'boolean', default: false }),
    decoder_input_details: nullable({
      type: 'boolean',
      default: false,
      description: 'Return the prompt tokens in `details.prefill` (not when streaming).',
    }),
    return_k_alternatives: nullable(
      integer('Add the k most likely tokens to each token.', { minimum: 0, maximum: 20 }),
    ),
    seed: nullable(integer('Seed of sampling.', { minimum: 0, maximum: Number.MAX_SAFE_INTEGER })),
    response_format: nullable(ref('ResponseFormat')),
    apply_chat_template: nullable({ type: 'boolean' }),
  },
}

export const GenerateRequest: JsonSchema = {
  type: 'object',
  required: ['inputs'],
  additionalProperties: false,
  properties: {
    inputs: { type: 'string', minLength: 1, description: 'The prompt.' },
    parameters: nullable(ref('GenerateParameters')),
    stream: nullable({ type: 'boolean', default: false, description: 'Read by `POST /` only: answer as a stream.' }),
  },
}

export const AlternativeToken: JsonSchema = {
  type: 'object',
  required: ['id', 'text', 'logprob'],
  properties: { id: { type: 'integer' }, text: { type: 'string' }, logprob: { type: 'number' } },
}

export const Token: JsonSchema = {
  type: 'object',
  description: 'A generated token (`skipped`: proposed by Medusa and accepted, so it cost no decoding step).',
  required: ['id', 'text', 'logprob', 'special', 'skipped'],
  properties: {
    id: { type: 'integer' },
    text: { type: 'string' },
    logprob: { type: 'number' },
    special: { type: 'boolean' },
    alternative_tokens: {
      type: 'array',
      items: ref('AlternativeToken'),
      description: 'With `return_k_alternatives`: the k most likely tokens at this step, most likely first.',
    },
    skipped: { type: 'boolean' },
  },
}

export const PrefillToken: JsonSchema = {
  type: 'object',
  required: ['id', 'text', 'logprob'],
  properties: { id: { type: 'integer' }, text: { type: 'string' }, logprob: { type: ['number', 'null'] } },
}

const finishReason: JsonSchema = { type: 'string', enum: ['length', 'eos_token', 'stop_sequence'] }

export const GenerateDetails: JsonSchema = {
  type: 'object',
  required: ['finish_reason', 'prompt_tokens', 'generated_tokens', 'skipped_tokens', 'seed', 'prefill', 'tokens'],
  properties: {
    finish_reason: finishReason,
    prompt_tokens: { type: 'integer' },
    generated_tokens: { type: 'integer' },
    skipped_tokens: { type: 'integer' },
    seed: { type: ['integer', 'null'], description: 'The sampling seed; null for greedy decoding.' },
    prefill: { type: 'array', items: ref('PrefillToken') },
    tokens: { type: 'array', items: ref('Token') },
  },
}

export const GenerateResponse: JsonSchema = {
  type: 'object',
  required: ['generated_text'],
  properties: {
    generated_text: { type: 'string' },
    details: ref('GenerateDetails'),
  },
}

export const StreamDetails: JsonSchema = {
  type: 'object',
  required: ['finish_reason', 'prompt_tokens', 'generated_tokens', 'seed'],
  properties: {
    finish_reason: finishReason,
    prompt_tokens: { type: 'integer' },
    generated_tokens: { type: 'integer' },
    seed: { type: ['integer', 'null'] },
  },
}

export const GenerateStreamEvent: JsonSchema = {
  type: 'object',
  description:
    'One token per event; the last event also carries `generated_text` (and `details` when asked for). ' +
    'An error after the stream started arrives as a last event holding a `NativeError`.',
  required: ['token', 'generated_text', 'details'],
  properties: {
    token: ref('Token'),
    generated_text: { type: ['string', 'null'] },
    details: { anyOf: [ref('StreamDetails'), { type: 'null' }] },
  },
}

export const NativeError: JsonSchema = {
  type: 'object',
  description: "LoRAX's error body. `error_type` is fixed by the error code (docs/errors.md).",
  required: ['error', 'error_type'],
  properties: { error: { type: 'string' }, error_type: { type: 'string' } },
}

/** Real answers of the demo model, used as the routes' examples. */
export const NATIVE_EXAMPLES = {
  request: {
    summary: 'Greedy, with details, through the `kjv` adapter',
    value: { inputs: 'ROMEO:\n', parameters: { max_new_tokens: 6, adapter_id: 'kjv', details: true } },
  },
  sampledRequest: {
    summary: 'Sampled with a seed, with the prompt tokens and 2 alternatives per token',
    value: {
      inputs: 'ROMEO:\n',
      parameters: {
        max_new_tokens: 3,
        do_sample: true,
        seed: 42,
        details: true,
        decoder_input_details: true,
        return_k_alternatives: 2,
      },
    },
  },
  response: {
    summary: 'With details',
    value: {
      generated_text: 'And the he that I have',
      details: {
        finish_reason: 'length',
        prompt_tokens: 4,
        generated_tokens: 6,
        skipped_tokens: 1,
        seed: null,
        prefill: [],
        tokens: [
          { id: 306, text: 'And', logprob: -1.9239727221461393, special: false, skipped: false },
          { id: 258, text: ' the', logprob: -1.9299974178919825, special: false, skipped: false },
          { id: 298, text: ' he', logprob: -4.814622600602339, special: false, skipped: true },
          { id: 304, text: ' that', logprob: -2.984966062136868, special: false, skipped: false },
          { id: 299, text: ' I', logprob: -2.8410838396291798, special: false, skipped: false },
          { id: 385, text: ' have', logprob: -2.1328461105590204, special: false, skipped: false },
        ],
      },
    },
  },
  sampledResponse: {
    summary: 'Sampled, with the prompt tokens and alternatives',
    value: {
      generated_text: 'O! mad',
      details: {
        finish_reason: 'length',
        prompt_tokens: 4,
        generated_tokens: 3,
        skipped_tokens: 0,
        seed: 42,
        prefill: [
          { id: 2043, text: '<|bos|>', logprob: null },
          { id: 1981, text: 'ROMEO', logprob: -6.461926545773403 },
          { id: 58, text: ':', logprob: -0.003641595154608268 },
          { id: 10, text: '\n', logprob: -0.010016366310670932 },
        ],
        tokens: [
          {
            id: 79,
            text: 'O',
            logprob: -2.7090271088391003,
            special: false,
            alternative_tokens: [
              { id: 73, text: 'I', logprob: -2.367363748243397 },
              { id: 79, text: 'O', logprob: -2.7090271088391003 },
            ],
            skipped: false,
          },
          {
            id: 33,
            text: '!',
            logprob: -5.069009028528516,
            special: false,
            alternative_tokens: [
              { id: 44, text: ',', logprob: -1.0145537482245608 },
              { id: 110, text: 'n', logprob: -2.9656431303961917 },
            ],
            skipped: false,
          },
          {
            id: 548,
            text: ' mad',
            logprob: -5.790276462040023,
            special: false,
            alternative_tokens: [
              { id: 10, text: '\n', logprob: -2.5104111971474445 },
              { id: 597, text: ' what', logprob: -2.8741635622597492 },
            ],
            skipped: false,
          },
        ],
      },
    },
  },
  plainResponse: { summary: 'Without details', value: { generated_text: 'I will not a word to the world' } },
  streamRequest: {
    summary: 'Three tokens, with details',
    value: { inputs: 'ROMEO:\n', parameters: { max_new_tokens: 3, details: true } },
  },
  stream:
    'data: {"token":{"id":73,"text":"I","logprob":-2.367363792936146,"special":false,"skipped":false},' +
    '"generated_text":null,"details":null}\n\n' +
    'data: {"token":{"id":391,"text":" will","logprob":-2.3313867125532255,"special":false,"skipped":false},' +
    '"generated_text":null,"details":null}\n\n' +
    'data: {"token":{"id":339,"text":" not","logprob":-1.3933232421589352,"special":false,"skipped":true},' +
    '"generated_text":"I will not","details":{"finish_reason":"length","prompt_tokens":4,"generated_tokens":3,' +
    '"seed":null}}\n\n',
} as const

export const NATIVE_SCHEMAS = {
  GenerateRequest,
  GenerateParameters,
  MergedAdapters,
  ResponseFormat,
  GenerateResponse,
  GenerateDetails,
  Token,
  AlternativeToken,
  PrefillToken,
  GenerateStreamEvent,
  StreamDetails,
  NativeError,
}
