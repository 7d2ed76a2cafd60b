import { ANY_ROUTE_ERRORS, errorResponses } from './error-responses.ts'
import type { JsonSchema } from './json-schema.ts'
import { jsonContent, response } from './media.ts'
import type { RouteDoc } from './route-doc.ts'

/** The OpenAPI descriptions of `/health`, `/info`, `/metrics` (`system-routes.ts`) and `/openapi.json`. */

export const Info: JsonSchema = {
  type: 'object',
  description: "LoRAX's `Info` fields that apply to Loom, plus the backend, the adapter sources and the speculator.",
  required: [
    'model_id',
    'model_dtype',
    'model_device_type',
    'backend',
    'max_input_length',
    'max_total_tokens',
    'max_batch_size',
    'max_concurrent_requests',
    'max_stop_sequences',
    'max_batch_prefill_tokens',
    'version',
    'adapter_sources',
    'default_adapter_source',
  ],
  properties: {
    model_id: { type: 'string' },
    model_sha: { type: ['string', 'null'] },
    model_dtype: { type: 'string', examples: ['float32', 'float16', 'bfloat16'] },
    model_device_type: { type: 'string', examples: ['cpu', 'cuda'] },
    model_pipeline_tag: { type: ['string', 'null'] },
    backend: { type: 'string' },
    max_input_length: { type: 'integer' },
    max_total_tokens: { type: 'integer' },
    max_batch_size: { type: 'integer' },
    max_concurrent_requests: { type: 'integer' },
    max_stop_sequences: { type: 'integer' },
    max_batch_prefill_tokens: { type: 'integer' },
    max_best_of: { type: 'integer' },
    version: { type: 'string', description: "Loom's version." },
    sha: { type: ['string', 'null'] },
    adapter_sources: { type: 'array', items: { type: 'string' } },
    default_adapter_source: { type: 'string' },
    speculator: {
      description: 'The default Medusa heads every request runs with; null without speculation.',
      anyOf: [
        {
          type: 'object',
          required: ['kind', 'adapter_id', 'adapter_source', 'heads'],
          properties: {
            kind: { const: 'medusa' },
            adapter_id: { type: 'string' },
            adapter_source: { type: 'string' },
            heads: { type: 'integer', minimum: 1 },
          },
        },
        { type: 'null' },
      ],
    },
  },
}

export const SYSTEM_SCHEMAS = { Info }

const notReady = errorResponses('native', ['backend_not_ready', ...ANY_ROUTE_ERRORS])

export const healthDoc: RouteDoc = {
  operationId: 'health',
  summary: 'Readiness',
  description: 'As LoRAX: 200 with an empty body once the model is loaded; 503 before (and while draining).',
  tags: ['system'],
  response: { 200: response('The model is loaded.', null), ...notReady },
}

export const infoDoc: RouteDoc = {
  operationId: 'info',
  summary: 'Server and model facts',
  description: "The model, its limits and the server's adapter sources; 503 until the model is loaded.",
  tags: ['system'],
  response: {
    200: response(
      'The facts.',
      jsonContent('Info', {
        demo: {
          summary: 'The demo model (`npm start`)',
          value: {
            model_id: 'loom-demo',
            model_dtype: 'float32',
            model_device_type: 'cpu',
            backend: 'cuda-native',
            max_input_length: 511,
            max_total_tokens: 512,
            max_batch_size: 32,
            max_concurrent_requests: 128,
            max_stop_sequences: 4,
            max_batch_prefill_tokens: 2048,
            version: '0.1.0',
            adapter_sources: ['local', 'demo-heads'],
            default_adapter_source: 'local',
            speculator: { kind: 'medusa', adapter_id: 'medusa', adapter_source: 'demo-heads', heads: 4 },
          },
        },
      }),
    ),
    ...notReady,
  },
}

export const metricsDoc: RouteDoc = {
  operationId: 'metrics',
  summary: 'Prometheus metrics',
  description: 'The Prometheus text format (`text/plain; version=0.0.4`); always answers, even while loading.',
  tags: ['system'],
  response: {
    200: response('The metrics.', {
      'text/plain': {
        schema: { type: 'string' },
        example: [
          '# HELP loom_request_count Generation requests received',
          '# TYPE loom_request_count counter',
          'loom_request_count 0',
          '# HELP loom_request_success Generation requests that succeeded',
          '# TYPE loom_request_success counter',
          'loom_request_success 0',
          '',
        ].join('\n'),
      },
    }),
    ...errorResponses('native', ANY_ROUTE_ERRORS),
  },
}

export const openApiDoc: RouteDoc = {
  operationId: 'openapi',
  summary: 'This OpenAPI document',
  description: 'The OpenAPI 3.1 description of every route; `/docs` renders it with Swagger UI.',
  tags: ['system'],
  response: {
    200: response('The document.', {
      'application/json': {
        schema: {
          type: 'object',
          required: ['openapi', 'info', 'paths'],
          properties: { openapi: { type: 'string' }, info: { type: 'object' }, paths: { type: 'object' } },
        },
      },
    }),
    ...errorResponses('native', ANY_ROUTE_ERRORS),
  },
}
