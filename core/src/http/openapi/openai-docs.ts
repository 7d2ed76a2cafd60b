import type { ErrorCode } from '../../errors/registry.ts'
import { ANY_ROUTE_ERRORS, GENERATION_ERRORS, errorResponses } from './error-responses.ts'
import { ref } from './json-schema.ts'
import { jsonBody, jsonContent, response, sseContent } from './media.ts'
import { OPENAI_EXAMPLES as EX } from './openai-schemas.ts'
import type { RouteDoc } from './route-doc.ts'

/** The OpenAPI descriptions of the OpenAI-compatible routes (`core/src/routes/openai`). */

const CHAT_ERRORS: readonly ErrorCode[] = [...GENERATION_ERRORS, 'template_error', 'template_missing']

const STREAM_END =
  'then `data: [DONE]`. An error after the stream started is a last event holding an `OpenAiError` ' +
  '(the SDK raises it as an `APIError`).'

function stream(chunk: string, example: string) {
  return sseContent({ anyOf: [ref(chunk), ref('OpenAiError')] }, example)
}

export const chatCompletionsDoc: RouteDoc = {
  operationId: 'createChatCompletion',
  summary: 'Chat completion',
  description:
    "OpenAI's chat completions, with `n` choices. The prompt is the adapter's chat template (else the base " +
    "model's) applied to `messages`; without `max_tokens`, up to the context limit. Streamed: a role chunk, " +
    `a content chunk per token, a finishing chunk per choice, a usage chunk when asked for, ${STREAM_END}`,
  tags: ['openai'],
  body: jsonBody('ChatCompletionRequest', {
    greedy: EX.chatRequest,
    logprobs: EX.chatLogprobsRequest,
    stream: EX.chatStreamRequest,
  }),
  response: {
    200: response('The completion, or with `stream: true` its chunks as server-sent events.', {
      ...jsonContent('ChatCompletion', { greedy: EX.chat, logprobs: EX.chatLogprobs }),
      ...stream('ChatCompletionChunk', EX.chatStream),
    }),
    ...errorResponses('openai', CHAT_ERRORS),
  },
}

export const completionsDoc: RouteDoc = {
  operationId: 'createCompletion',
  summary: 'Completion',
  description:
    "OpenAI's (legacy) completions: plain prompts, no template, one or many, each with `n` choices; " +
    `without \`max_tokens\`, 16 tokens. Streamed: a chunk per token and a finishing chunk per choice, ${STREAM_END}`,
  tags: ['openai'],
  body: jsonBody('CompletionRequest', { logprobs: EX.completionRequest, stream: EX.completionStreamRequest }),
  response: {
    200: response('The completion, or with `stream: true` its chunks as server-sent events.', {
      ...jsonContent('Completion', { logprobs: EX.completion }),
      ...stream('CompletionChunk', EX.completionStream),
    }),
    ...errorResponses('openai', GENERATION_ERRORS),
  },
}

export const listModelsDoc: RouteDoc = {
  operationId: 'listModels',
  summary: 'List models',
  description:
    'The base model, then the LoRA adapters offered to every caller (adapter directories under the local ' +
    'roots, what a source plugin lists, preloaded adapters). Medusa heads are not models (see `GET /info`).',
  tags: ['openai'],
  response: {
    200: response('The models.', jsonContent('ModelList', { demo: EX.models })),
    ...errorResponses('openai', ANY_ROUTE_ERRORS),
  },
}

export const retrieveModelDoc: RouteDoc = {
  url: '/v1/models/{id}',
  operationId: 'retrieveModel',
  summary: 'Retrieve a model',
  description: 'One entry of `GET /v1/models`; an id the list lacks is a 404.',
  tags: ['openai'],
  params: {
    type: 'object',
    required: ['id'],
    properties: {
      id: {
        type: 'string',
        description: 'The model or adapter id; may hold slashes (`org/name`), sent as is or encoded.',
      },
    },
  },
  response: {
    200: response('The model.', jsonContent('Model', { adapter: EX.model })),
    ...errorResponses('openai', ['model_not_found', ...ANY_ROUTE_ERRORS]),
  },
}
