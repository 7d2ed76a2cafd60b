import { ERRORS } from '../../errors/registry.ts'
import { MAX_ADAPTER_ID_LENGTH, MAX_SOURCE_NAME_LENGTH } from '../../validation/fields.ts'
import { nullable, ref, type JsonSchema } from './json-schema.ts'

/**
 * The OpenAI-compatible API's shapes, as `components.schemas` of the OpenAPI document. Request
 * schemas describe what `parse-chat-body.ts` / `parse-completions-body.ts` accept (they, not these,
 * validate requests); response schemas describe what the `/v1` routes write. `examples` are real
 * answers of the demo model (`npm start`).
 */

const stop: JsonSchema = nullable({
  description: 'A string or at most `max_stop_sequences` strings (`GET /info`).',
  anyOf: [
    { type: 'string', minLength: 1 },
    { type: 'array', items: { type: 'string', minLength: 1 } },
  ],
})

/** Fields both endpoints accept (`parse-openai-common.ts`, `parse-ignored-fields.ts`). */
const commonFields: Record<string, JsonSchema> = {
  model: {
    type: 'string',
    maxLength: MAX_ADAPTER_ID_LENGTH,
    description: '`""` or the served model id: the base model; any other value: an adapter id.',
  },
  max_tokens: nullable({ type: 'integer', minimum: 1, description: 'At most `max_total_tokens`.' }),
  temperature: nullable({ type: 'number', minimum: 0, maximum: 2, default: 1 }),
  top_p: nullable({ type: 'number', exclusiveMinimum: 0, maximum: 1, default: 1 }),
  n: nullable({ type: 'integer', minimum: 1, maximum: 16, default: 1 }),
  stop,
  seed: nullable({ type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  presence_penalty: nullable({ type: 'number', minimum: -2, maximum: 2, default: 0 }),
  frequency_penalty: nullable({ type: 'number', minimum: -2, maximum: 2, default: 0 }),
  stream: nullable({ type: 'boolean', default: false }),
  stream_options: nullable({
    type: 'object',
    description: 'Only with `stream: true`.',
    properties: { include_usage: nullable({ type: 'boolean', default: false }) },
  }),
  logit_bias: nullable({ type: 'object', maxProperties: 0, description: 'Not supported: empty or absent.' }),
  adapter_source: nullable({
    type: 'string',
    maxLength: MAX_SOURCE_NAME_LENGTH,
    description: 'Loom / LoRAX extension: the source of the adapter named by `model`.',
  }),
  api_token: nullable({ type: 'string', description: "Loom / LoRAX extension: the adapter's token." }),
  top_k: nullable({ type: 'integer', minimum: 0, description: 'Loom / LoRAX extension; 0: off.' }),
  repetition_penalty: nullable({ type: 'number', exclusiveMinimum: 0, default: 1 }),
  ignore_eos_token: nullable({ type: 'boolean', default: false }),
  merged_adapters: nullable(ref('MergedAdapters')),
  user: nullable({ type: 'string', description: 'Ignored.' }),
  metadata: nullable({
    type: 'object',
    maxProperties: 16,
    additionalProperties: { type: 'string', maxLength: 512 },
    description: 'Ignored.',
  }),
  store: nullable({ type: 'boolean', description: 'Ignored.' }),
  service_tier: nullable({ type: 'string', description: 'Ignored.' }),
  parallel_tool_calls: nullable({ type: 'boolean', description: 'Ignored.' }),
}

const textPart: JsonSchema = {
  type: 'object',
  required: ['type', 'text'],
  properties: { type: { const: 'text' }, text: { type: 'string' } },
}

export const ChatMessage: JsonSchema = {
  type: 'object',
  description: '`developer` messages reach the chat template as `system`.',
  required: ['role', 'content'],
  properties: {
    role: { type: 'string', enum: ['system', 'developer', 'user', 'assistant'] },
    content: { anyOf: [{ type: 'string' }, { type: 'array', items: textPart }] },
    name: nullable({ type: 'string' }),
    tool_calls: { type: 'null', description: 'Not supported.' },
  },
}

const unsupported = { type: 'null', description: 'Not supported: absent or null.' }

export const ChatCompletionRequest: JsonSchema = {
  type: 'object',
  required: ['model', 'messages'],
  additionalProperties: false,
  properties: {
    ...commonFields,
    messages: { type: 'array', minItems: 1, items: ref('ChatMessage') },
    max_completion_tokens: nullable({
      type: 'integer',
      minimum: 1,
      description: 'Takes precedence over `max_tokens`.',
    }),
    logprobs: nullable({ type: 'boolean', default: false }),
    top_logprobs: nullable({ type: 'integer', minimum: 0, maximum: 20, description: 'Requires `logprobs: true`.' }),
    response_format: nullable(ref('ResponseFormat')),
    tools: unsupported,
    tool_choice: unsupported,
    functions: unsupported,
    function_call: unsupported,
  },
}

export const CompletionRequest: JsonSchema = {
  type: 'object',
  required: ['model', 'prompt'],
  additionalProperties: false,
  properties: {
    ...commonFields,
    max_tokens: nullable({ type: 'integer', minimum: 1, default: 16, description: 'At most `max_total_tokens`.' }),
    prompt: {
      anyOf: [
        { type: 'string', minLength: 1 },
        { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } },
      ],
    },
    echo: nullable({ type: 'boolean', default: false }),
    logprobs: nullable({ type: 'integer', minimum: 0, maximum: 5 }),
    best_of: { enum: [1, null], description: 'Only 1 (the default) is supported.' },
  },
}

export const Usage: JsonSchema = {
  type: 'object',
  required: ['prompt_tokens', 'completion_tokens', 'total_tokens'],
  properties: {
    prompt_tokens: { type: 'integer' },
    completion_tokens: { type: 'integer' },
    total_tokens: { type: 'integer' },
  },
}

const tokenLogprob: JsonSchema = {
  type: 'object',
  required: ['token', 'logprob', 'bytes'],
  properties: {
    token: { type: 'string' },
    logprob: { type: 'number' },
    bytes: { type: ['array', 'null'], items: { type: 'integer' } },
  },
}

export const ChatLogprobs: JsonSchema = {
  type: 'object',
  required: ['content'],
  properties: {
    content: {
      type: ['array', 'null'],
      items: {
        ...tokenLogprob,
        required: ['token', 'logprob', 'bytes', 'top_logprobs'],
        properties: { ...(tokenLogprob.properties as object), top_logprobs: { type: 'array', items: tokenLogprob } },
      },
    },
    refusal: { type: ['array', 'null'] },
  },
}

export const CompletionLogprobs: JsonSchema = {
  type: 'object',
  description: "`text_offset`: UTF-16 indices into the choice's `text`.",
  required: ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'],
  properties: {
    tokens: { type: 'array', items: { type: 'string' } },
    token_logprobs: { type: 'array', items: { type: ['number', 'null'] } },
    top_logprobs: {
      type: 'array',
      items: { type: ['object', 'null'], additionalProperties: { type: 'number' } },
    },
    text_offset: { type: 'array', items: { type: 'integer' } },
  },
}

const finishReason: JsonSchema = { type: 'string', enum: ['stop', 'length'] }
const envelope = (object: string): Record<string, JsonSchema> => ({
  id: { type: 'string' },
  object: { const: object },
  created: { type: 'integer', description: 'Unix seconds.' },
  model: { type: 'string', description: 'The served model id for the base model, else the adapter id.' },
})
const envelopeKeys = ['id', 'object', 'created', 'model', 'choices']

/** A chat choice: its `message` (a completion) or its `delta` (a chunk). */
const chatChoice = (field: 'message' | 'delta', body: JsonSchema, finish: JsonSchema): JsonSchema => ({
  type: 'object',
  required: ['index', field, 'logprobs', 'finish_reason'],
  properties: {
    index: { type: 'integer' },
    [field]: body,
    logprobs: { anyOf: [ref('ChatLogprobs'), { type: 'null' }] },
    finish_reason: finish,
  },
})

export const ChatCompletion: JsonSchema = {
  type: 'object',
  required: [...envelopeKeys, 'usage'],
  properties: {
    ...envelope('chat.completion'),
    choices: {
      type: 'array',
      items: chatChoice(
        'message',
        {
          type: 'object',
          required: ['role', 'content'],
          properties: { role: { const: 'assistant' }, content: { type: 'string' }, refusal: { type: 'null' } },
        },
        finishReason,
      ),
    },
    usage: ref('Usage'),
  },
}

const streamUsage: JsonSchema = {
  anyOf: [ref('Usage'), { type: 'null' }],
  description: 'With `stream_options.include_usage` only: null, and the usage on a last chunk with no choices.',
}

export const ChatCompletionChunk: JsonSchema = {
  type: 'object',
  description: 'A role chunk first, then a content delta per token, then a finishing chunk per choice.',
  required: envelopeKeys,
  properties: {
    ...envelope('chat.completion.chunk'),
    choices: {
      type: 'array',
      items: chatChoice(
        'delta',
        { type: 'object', properties: { role: { const: 'assistant' }, content: { type: 'string' } } },
        nullable(finishReason),
      ),
    },
    usage: streamUsage,
  },
}

const completionChoice = (finish: JsonSchema): JsonSchema => ({
  type: 'object',
  required: ['index', 'text', 'logprobs', 'finish_reason'],
  properties: {
    index: { type: 'integer', description: 'Prompt index × n + choice number.' },
    text: { type: 'string' },
    logprobs: { anyOf: [ref('CompletionLogprobs'), { type: 'null' }] },
    finish_reason: finish,
  },
})

export const Completion: JsonSchema = {
  type: 'object',
  required: [...envelopeKeys, 'usage'],
  properties: {
    ...envelope('text_completion'),
    choices: { type: 'array', items: completionChoice(finishReason) },
    usage: ref('Usage'),
  },
}

export const CompletionChunk: JsonSchema = {
  type: 'object',
  required: envelopeKeys,
  properties: {
    ...envelope('text_completion'),
    choices: { type: 'array', items: completionChoice(nullable(finishReason)) },
    usage: streamUsage,
  },
}

export const Model: JsonSchema = {
  type: 'object',
  description: 'The base model, or a LoRA adapter (with `parent`, `adapter_source` and `revision`).',
  required: ['id', 'object', 'created', 'owned_by'],
  properties: {
    id: { type: 'string' },
    object: { const: 'model' },
    created: { type: 'integer' },
    owned_by: { type: 'string' },
    parent: { type: 'string' },
    adapter_source: { type: 'string' },
    revision: { type: ['string', 'null'] },
    download: {
      type: 'object',
      description: 'Only on `GET /v1/models/{id}` while the adapter is being fetched (a Loom extension): its progress.',
      required: ['status', 'bytes', 'total_bytes', 'percent', 'bytes_per_second', 'eta_s', 'started_at'],
      properties: {
        status: { const: 'downloading' },
        bytes: { type: 'integer', minimum: 0 },
        total_bytes: { type: 'integer', minimum: 0, description: '0 when the source gave no sizes' },
        percent: { type: ['integer', 'null'], minimum: 0, maximum: 100 },
        bytes_per_second: { type: 'integer', minimum: 0 },
        eta_s: { type: ['integer', 'null'], minimum: 0, description: 'seconds left at the mean rate so far' },
        started_at: { type: 'string', description: 'ISO 8601 time' },
      },
    },
  },
}

export const ModelList: JsonSchema = {
  type: 'object',
  required: ['object', 'data'],
  properties: { object: { const: 'list' }, data: { type: 'array', items: ref('Model') } },
}

export const OpenAiError: JsonSchema = {
  type: 'object',
  description: "OpenAI's error body; `code` is Loom's stable error code (docs/errors.md).",
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['message', 'type', 'param', 'code'],
      properties: {
        message: { type: 'string' },
        type: {
          type: 'string',
          enum: [...new Set(Object.values(ERRORS).map((spec) => spec.openaiType))],
        },
        param: { type: ['string', 'null'], description: 'The request field at fault.' },
        code: { type: 'string', enum: Object.keys(ERRORS) },
      },
    },
  },
}

/** Real answers of the demo model, used as the routes' examples. */
export const OPENAI_EXAMPLES = {
  chatRequest: {
    summary: 'The base model, greedy',
    value: {
      model: '',
      messages: [{ role: 'user', content: 'What is the meaning of love?' }],
      max_tokens: 8,
      temperature: 0,
    },
  },
  chatLogprobsRequest: {
    summary: 'The `kjv` adapter, with logprobs',
    value: {
      model: 'kjv',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 2,
      temperature: 0,
      logprobs: true,
      top_logprobs: 1,
    },
  },
  chatStreamRequest: {
    summary: 'Streamed, with usage',
    value: {
      model: '',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 2,
      stream: true,
      stream_options: { include_usage: true },
    },
  },
  chat: {
    summary: 'The base model',
    value: {
      id: 'chatcmpl-c7bf2353ccbd4e6caa40441ba90e2086',
      object: 'chat.completion',
      created: 1795679367,
      model: 'loom-demo',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'POLIXENES:\n', refusal: null },
          logprobs: null,
          finish_reason: 'length',
        },
      ],
      usage: { prompt_tokens: 16, completion_tokens: 8, total_tokens: 24 },
    },
  },
  chatLogprobs: {
    summary: 'The `kjv` adapter, with logprobs',
    value: {
      id: 'chatcmpl-8132e6117ae24934b70144534a1ca9be',
      object: 'chat.completion',
      created: 1795679367,
      model: 'kjv',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'And the', refusal: null },
          logprobs: {
            content: [
              {
                token: 'And',
                logprob: -1.458974117093737,
                bytes: [65, 110, 100],
                top_logprobs: [{ token: 'And', logprob: -1.458974117093737, bytes: [65, 110, 100] }],
              },
              {
                token: ' the',
                logprob: -2.0353887922129985,
                bytes: [32, 116, 104, 101],
                top_logprobs: [{ token: ' the', logprob: -2.0353887922129985, bytes: [32, 116, 104, 101] }],
              },
            ],
            refusal: null,
          },
          finish_reason: 'length',
        },
      ],
      usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
    },
  },
  chatStream: [
    '{"id":"chatcmpl-7163d12300fb4b24995f30c65690a0ba","object":"chat.completion.chunk","created":1795679367,"model":"loom-demo","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}',
    '{"id":"chatcmpl-7163d12300fb4b24995f30c65690a0ba","object":"chat.completion.chunk","created":1795679367,"model":"loom-demo","choices":[{"index":0,"delta":{"content":"C"},"logprobs":null,"finish_reason":null}],"usage":null}',
    '{"id":"chatcmpl-7163d12300fb4b24995f30c65690a0ba","object":"chat.completion.chunk","created":1795679367,"model":"loom-demo","choices":[{"index":0,"delta":{"content":"OR"},"logprobs":null,"finish_reason":null}],"usage":null}',
    '{"id":"chatcmpl-7163d12300fb4b24995f30c65690a0ba","object":"chat.completion.chunk","created":1795679367,"model":"loom-demo","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"usage":null}',
    '{"id":"chatcmpl-7163d12300fb4b24995f30c65690a0ba","object":"chat.completion.chunk","created":1795679367,"model":"loom-demo","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}',
    '[DONE]',
  ]
    .map((data) => `data: ${data}\n\n`)
    .join(''),
  completionRequest: {
    summary: 'The `devil` adapter, greedy, with logprobs',
    value: { model: 'devil', prompt: 'LOVE, n.', max_tokens: 6, temperature: 0, logprobs: 1 },
  },
  completionStreamRequest: {
    summary: 'Streamed',
    value: { model: '', prompt: 'ROMEO:', max_tokens: 2, stream: true },
  },
  completion: {
    summary: 'The `devil` adapter, with logprobs',
    value: {
      id: 'cmpl-aac32b5dd7a2410cb615eb8fbba01302',
      object: 'text_completion',
      created: 1795679367,
      model: 'devil',
      choices: [
        {
          index: 0,
          text: '  A phiment',
          logprobs: {
            tokens: [' ', ' A', ' p', 'h', 'im', 'ent'],
            token_logprobs: [
              -0.2512240960524039, -1.3099264574687197, -2.5564223136501845, -2.8818474267094096, -2.17189443298232,
              -2.3820714185802068,
            ],
            top_logprobs: [
              { ' ': -0.2512240960524039 },
              { ' A': -1.3099264574687197 },
              { ' p': -2.5564223136501845 },
              { h: -2.8818474267094096 },
              { im: -2.17189443298232 },
              { ent: -2.3820714185802068 },
            ],
            text_offset: [0, 1, 3, 5, 6, 8],
          },
          finish_reason: 'length',
        },
      ],
      usage: { prompt_tokens: 7, completion_tokens: 6, total_tokens: 13 },
    },
  },
  completionStream: [
    '{"id":"cmpl-5b3a2d1eb81840ca98688df549c54fb1","object":"text_completion","created":1795679367,"model":"loom-demo","choices":[{"index":0,"text":"\\n","logprobs":null,"finish_reason":null}]}',
    '{"id":"cmpl-5b3a2d1eb81840ca98688df549c54fb1","object":"text_completion","created":1795679367,"model":"loom-demo","choices":[{"index":0,"text":"G","logprobs":null,"finish_reason":null}]}',
    '{"id":"cmpl-5b3a2d1eb81840ca98688df549c54fb1","object":"text_completion","created":1795679367,"model":"loom-demo","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}]}',
    '[DONE]',
  ]
    .map((data) => `data: ${data}\n\n`)
    .join(''),
  models: {
    summary: 'The demo model and its two LoRA adapters',
    value: {
      object: 'list',
      data: [
        { id: 'loom-demo', object: 'model', created: 1795679347, owned_by: 'loom' },
        {
          id: 'devil',
          object: 'model',
          created: 1795679347,
          owned_by: 'loom',
          parent: 'loom-demo',
          adapter_source: 'local',
          revision: '03d87b2812a7dde8',
        },
        {
          id: 'kjv',
          object: 'model',
          created: 1795679347,
          owned_by: 'loom',
          parent: 'loom-demo',
          adapter_source: 'local',
          revision: 'afbe1a908fd55002',
        },
      ],
    },
  },
  model: {
    summary: 'A LoRA adapter',
    value: {
      id: 'kjv',
      object: 'model',
      created: 1795679347,
      owned_by: 'loom',
      parent: 'loom-demo',
      adapter_source: 'local',
      revision: 'afbe1a908fd55002',
    },
  },
} as const

export const OPENAI_SCHEMAS = {
  ChatCompletionRequest,
  ChatMessage,
  CompletionRequest,
  ChatCompletion,
  ChatCompletionChunk,
  ChatLogprobs,
  Completion,
  CompletionChunk,
  CompletionLogprobs,
  Usage,
  Model,
  ModelList,
  OpenAiError,
}
