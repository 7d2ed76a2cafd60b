/**
 * Every error Loom reports, by stable code. Routes map a `LoomError` to the error shape of their API
 * family (`map-native.ts`, `map-openai.ts`); startup errors are printed by the CLI. Each code is
 * documented in `docs/errors.md` (a test keeps the two in step).
 *
 * `nativeType` is the LoRAX-style `error_type`; `openaiType` is OpenAI's `error.type`.
 * Message templates use `{name}` placeholders filled from the error's params. Params must never
 * carry a secret.
 */
export interface ErrorSpec {
  readonly status: number
  readonly nativeType: string
  readonly openaiType: OpenAiErrorType
  readonly message: string
}

export type OpenAiErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'server_error'

const spec = (status: number, nativeType: string, openaiType: OpenAiErrorType, message: string): ErrorSpec => ({
  status,
  nativeType,
  openaiType,
  message,
})

export const ERRORS = {
  // Request shape and HTTP framing
  validation_error: spec(
    422,
    'validation',
    'invalid_request_error',
    'Input validation error: `{field}` {expected}; received {received}',
  ),
  invalid_json: spec(400, 'validation', 'invalid_request_error', 'Request body is not valid JSON: {detail}'),
  unsupported_media_type: spec(
    415,
    'validation',
    'invalid_request_error',
    'Unsupported Content-Type {received}; send application/json',
  ),
  body_too_large: spec(
    413,
    'validation',
    'invalid_request_error',
    'Request body is larger than the limit of {limit} bytes',
  ),
  route_not_found: spec(404, 'not_found', 'not_found_error', 'No route {method} {url}'),
  method_not_allowed: spec(
    405,
    'validation',
    'invalid_request_error',
    'Method {method} is not allowed for {url}; use {allowed}',
  ),
  bad_request: spec(400, 'validation', 'invalid_request_error', 'Bad request: {detail}'),
  // 408: OpenAI's SDKs retry it (a client that stalled may well succeed on a fresh connection).
  request_timeout: spec(408, 'timeout', 'invalid_request_error', 'The request did not arrive in time: {detail}'),
  model_not_found: spec(
    404,
    'not_found',
    'not_found_error',
    'The model `{id}` does not exist on this server; GET /v1/models lists the base model and the adapters it knows',
  ),

  // Capacity and lifecycle
  overloaded: spec(429, 'overloaded', 'rate_limit_error', 'Model is overloaded: {detail}'),
  backend_not_ready: spec(503, 'unhealthy', 'server_error', 'The model is still loading; retry shortly'),
  server_closing: spec(503, 'unhealthy', 'server_error', 'The server is shutting down'),
  generation_error: spec(500, 'generation', 'server_error', 'Request failed during generation: {detail}'),
  // 499 as nginx logs it: the client went away, so nobody reads this answer; it keeps a cancelled
  // request out of the server-error logs and failure counts.
  request_cancelled: spec(499, 'cancelled', 'invalid_request_error', 'The request was cancelled by the client'),
  internal_error: spec(500, 'internal', 'server_error', 'Internal error ({detail})'),

  // Adapters
  adapter_source_unknown: spec(
    422,
    'validation',
    'invalid_request_error',
    'Unknown adapter_source `{source}`; this server knows: {known}',
  ),
  adapter_id_invalid: spec(
    422,
    'validation',
    'invalid_request_error',
    'Invalid adapter id `{id}` for source `{source}`: {detail}',
  ),
  adapter_not_found: spec(404, 'not_found', 'not_found_error', 'Adapter `{id}` was not found in source `{source}`'),
  adapter_source_unavailable: spec(
    502,
    'download_adapter',
    'server_error',
    'Adapter source `{source}` could not be reached for `{id}`: {detail}',
  ),
  adapter_download_failed: spec(
    502,
    'download_adapter',
    'server_error',
    'Downloading adapter `{id}` from `{source}` failed: {detail}',
  ),
  adapter_not_ready: spec(
    503,
    'download_adapter',
    'server_error',
    'Adapter `{id}` from `{source}` is not ready for use (status `{status}`): {detail}',
  ),
  adapter_invalid: spec(
    422,
    'load_adapter',
    'invalid_request_error',
    'Adapter `{id}` cannot be used with this model: {detail}',
  ),
  adapter_load_failed: spec(500, 'load_adapter', 'server_error', 'Loading adapter `{id}` failed: {detail}'),
  adapter_slots_full: spec(
    503,
    'load_adapter',
    'server_error',
    'All {slots} adapter slots are in use by running requests',
  ),
  medusa_no_default: spec(
    422,
    'load_adapter',
    'invalid_request_error',
    'Medusa adapter `{id}` cannot be used per request: the server was started without a default Medusa adapter',
  ),
  medusa_heads_mismatch: spec(
    422,
    'load_adapter',
    'invalid_request_error',
    'Medusa adapter `{id}` has {heads} heads; per-request Medusa adapters must have the {expected} heads of the default Medusa adapter',
  ),

  // Authorization
  auth_missing: spec(
    401,
    'unauthorized',
    'authentication_error',
    'Adapter `{id}` requires a token ({detail}): send `api_token` or `Authorization: Bearer`',
  ),
  auth_invalid: spec(401, 'unauthorized', 'authentication_error', 'The token was refused for adapter `{id}`: {detail}'),
  auth_forbidden: spec(403, 'forbidden', 'permission_error', 'The token may not read adapter `{id}`: {detail}'),
  auth_unavailable: spec(
    503,
    'unauthorized',
    'server_error',
    'Authorization for adapter `{id}` could not be checked: {detail}',
  ),

  // Templates, tokenizer, structured output
  template_error: spec(
    422,
    'template_error',
    'invalid_request_error',
    'Failed applying chat template to inputs: {detail}',
  ),
  template_missing: spec(
    422,
    'template_error',
    'invalid_request_error',
    'No chat template for `{model}`; use /v1/completions with a plain prompt',
  ),
  tokenizer_invalid: spec(500, 'internal', 'server_error', 'Tokenizer in {path} could not be loaded: {detail}'),
  grammar_unsupported: spec(422, 'validation', 'invalid_request_error', 'response_format cannot be compiled: {detail}'),

  // Startup: configuration, plugins, model
  config_unreadable: spec(500, 'config', 'server_error', '{file}: cannot read the configuration file: {detail}'),
  config_yaml_invalid: spec(500, 'config', 'server_error', '{file}: not valid YAML: {detail}'),
  config_env_missing: spec(
    500,
    'config',
    'server_error',
    '{file}: `{path}` uses ${{name}}, but the environment variable {name} is not set',
  ),
  config_invalid: spec(500, 'config', 'server_error', '{file}: `{path}` {expected}; found {received}'),
  plugin_not_found: spec(
    500,
    'config',
    'server_error',
    '{file}: `{path}` names plugin `{use}`, which cannot be found: {detail}',
  ),
  plugin_invalid: spec(500, 'config', 'server_error', '{file}: `{path}` plugin `{use}` is not a Loom plugin: {detail}'),
  plugin_options_invalid: spec(
    500,
    'config',
    'server_error',
    '{file}: `{path}` (plugin {plugin}) {expected}; found {received}',
  ),
  plugin_register_failed: spec(500, 'config', 'server_error', 'Plugin {plugin} failed to register: {detail}'),
  plugin_contract_mismatch: spec(500, 'config', 'server_error', 'Plugin {plugin} {detail}'),
  source_name_conflict: spec(
    500,
    'config',
    'server_error',
    'Two plugins provide adapter_source `{source}`: {first} and {second}',
  ),
  contract_missing: spec(
    500,
    'config',
    'server_error',
    'No plugin provides {contract}; add one to `plugins:` (for example {example})',
  ),
  contract_conflict: spec(500, 'config', 'server_error', 'Both {first} and {second} provide {contract}; only one may'),
  model_invalid: spec(500, 'model', 'server_error', 'Model in {path} cannot be served: {detail}'),
  native_addon_missing: spec(500, 'native', 'server_error', 'The native runtime could not be loaded: {detail}'),
  native_error: spec(500, 'native', 'server_error', 'Native runtime error: {detail}'),
  cuda_unavailable: spec(500, 'native', 'server_error', 'The cuda device cannot be used: {detail}'),
} as const satisfies Record<string, ErrorSpec>

export type ErrorCode = keyof typeof ERRORS
