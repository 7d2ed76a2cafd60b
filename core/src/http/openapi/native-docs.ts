import { GENERATION_ERRORS, errorResponses } from './error-responses.ts'
import { ref } from './json-schema.ts'
import { jsonBody, jsonContent, response, sseContent, type HeaderDoc } from './media.ts'
import { NATIVE_EXAMPLES as EX } from './native-schemas.ts'
import type { RouteDoc } from './route-doc.ts'

/** The OpenAPI descriptions of the native (LoRAX) routes in `native-routes.ts`. */

const ADAPTER_HEADERS: Readonly<Record<string, HeaderDoc>> = {
  'x-model-id': { description: 'The served model id.' },
  'x-adapter-id': { description: 'The adapter(s) used, comma-separated, percent-encoded; absent for the base model.' },
  'x-adapter-source': { description: 'Their source(s), comma-separated.' },
}

const COUNT_HEADERS: Readonly<Record<string, HeaderDoc>> = {
  'x-prompt-tokens': { description: 'Prompt tokens.', type: 'integer' },
  'x-generated-tokens': { description: 'Generated tokens.', type: 'integer' },
  'x-skipped-tokens': { description: 'Tokens accepted from Medusa proposals.', type: 'integer' },
}

const STREAM =
  'One event per token (`GenerateStreamEvent`); the last carries `generated_text` and, when asked for, ' +
  '`details`. An error after the stream started is a last event holding a `NativeError`.'

const stream = sseContent({ anyOf: [ref('GenerateStreamEvent'), ref('NativeError')] }, EX.stream)
const errors = errorResponses('native', GENERATION_ERRORS)

export const generateDoc: RouteDoc = {
  operationId: 'generate',
  summary: 'Generate text',
  description: "LoRAX's `/generate`: the whole text at once; `parameters.details` adds the tokens.",
  tags: ['native'],
  body: jsonBody('GenerateRequest', { greedy: EX.request, sampled: EX.sampledRequest }),
  response: {
    200: response(
      'The generated text.',
      jsonContent('GenerateResponse', { details: EX.response, sampled: EX.sampledResponse, plain: EX.plainResponse }),
      { ...ADAPTER_HEADERS, ...COUNT_HEADERS },
    ),
    ...errors,
  },
}

export const generateStreamDoc: RouteDoc = {
  operationId: 'generateStream',
  summary: 'Generate text as server-sent events',
  description: `LoRAX's \`/generate_stream\`. ${STREAM}`,
  tags: ['native'],
  body: jsonBody('GenerateRequest', { details: EX.streamRequest }),
  response: { 200: response(STREAM, stream, ADAPTER_HEADERS), ...errors },
}

export const compatDoc: RouteDoc = {
  operationId: 'generateCompat',
  summary: 'Generate text (the LoRAX client route)',
  description:
    "LoRAX's (and TGI's) compatibility route, where the `lorax-client` Python package posts: `/generate`'s " +
    "body plus `stream`. Without `stream`, `/generate`'s answer in a one-element array; with `stream: true`, " +
    "`/generate_stream`'s events.",
  tags: ['native'],
  body: jsonBody('GenerateRequest', {
    generate: EX.request,
    stream: { summary: 'Streamed', value: { ...EX.streamRequest.value, stream: true } },
  }),
  response: {
    200: response(
      'A one-element array of `GenerateResponse`, or with `stream: true` an event stream.',
      {
        ...jsonContent(
          { type: 'array', minItems: 1, maxItems: 1, items: ref('GenerateResponse') },
          { plain: { summary: 'Without details', value: [EX.plainResponse.value] } },
        ),
        ...stream,
      },
      ADAPTER_HEADERS,
    ),
    ...errors,
  },
}
