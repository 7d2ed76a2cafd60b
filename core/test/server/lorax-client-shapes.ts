/**
 * What the LoRAX Python client (`lorax-client`, predibase/lorax `clients/python/lorax`) sends and
 * accepts, transcribed for tests that replay it against Loom without Python.
 *
 * Requests: `Client.generate` / `generate_stream` build `Request(inputs, stream, parameters)` and
 * post `request.dict(by_alias=True)` to the server's root, so every `Parameters` field is sent,
 * null when unset, in the model's field order. Responses are checked against JSON schemas that
 * transcribe the client's pydantic models (pydantic ignores extra keys; `Optional[X]` with no
 * default is required but nullable; with `= None` it may be absent).
 */

/** `Parameters` as `Client.generate(prompt)` fills it (its defaults), in declaration order. */
export function clientParameters(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    adapter_id: null,
    adapter_source: null,
    merged_adapters: null,
    api_token: null,
    do_sample: false,
    max_new_tokens: null,
    ignore_eos_token: false,
    repetition_penalty: null,
    return_full_text: false,
    stop: [],
    seed: null,
    temperature: null,
    top_k: null,
    top_p: null,
    truncate: null,
    typical_p: null,
    best_of: null,
    watermark: false,
    details: true,
    decoder_input_details: false,
    return_k_alternatives: null,
    response_format: null,
    ...overrides,
  }
}

/** `Request(inputs=prompt, stream=..., parameters=...).dict(by_alias=True)`. */
export function clientRequest(
  prompt: string,
  stream: boolean,
  parameters: Record<string, unknown> = {},
): Record<string, unknown> {
  return { inputs: prompt, parameters: clientParameters(parameters), stream }
}

/** `MergedAdapters(...)` as dumped: `merge_strategy` and `majority_sign_method` null unless set. */
export function clientMergedAdapters(ids: string[], weights: number[], density: number): Record<string, unknown> {
  return { ids, weights, merge_strategy: null, density, majority_sign_method: null }
}

/** The headers `requests.Session.post(json=...)` sends (plus the client's own `headers`). */
export const CLIENT_HEADERS: Readonly<Record<string, string>> = {
  'user-agent': 'python-requests/2.32.3',
  'accept-encoding': 'gzip, deflate',
  accept: '*/*',
  connection: 'keep-alive',
  'content-type': 'application/json',
}

/**
 * The client's stream loop over `resp.iter_lines()`: every line that starts with `data:`,
 * `lstrip("data:")` (a character set, not a prefix), then `json.loads`. Other lines are skipped.
 */
export function clientStreamPayloads(body: string): unknown[] {
  return body
    .split(/\r\n|\r|\n/)
    .filter((line) => line.startsWith('data:'))
    .map((line) => JSON.parse(line.replace(/^[dat:]+/, '')) as unknown)
}

const nullable = (schema: object) => ({ anyOf: [{ type: 'null' }, schema] })
const FINISH_REASON = { enum: ['length', 'eos_token', 'stop_sequence'] }

/** `InputToken` and `AlternativeToken`: `{id, text, logprob?}`. */
const INPUT_TOKEN = {
  type: 'object',
  required: ['id', 'text'],
  properties: { id: { type: 'integer' }, text: { type: 'string' }, logprob: { type: ['number', 'null'] } },
}

const TOKEN = {
  type: 'object',
  required: ['id', 'text', 'logprob', 'special', 'skipped'],
  properties: {
    id: { type: 'integer' },
    text: { type: 'string' },
    logprob: { type: ['number', 'null'] },
    special: { type: 'boolean' },
    alternative_tokens: nullable({ type: 'array', items: INPUT_TOKEN }),
    skipped: { type: 'boolean' },
  },
}

const BEST_OF_SEQUENCE = {
  type: 'object',
  required: ['generated_text', 'finish_reason', 'generated_tokens', 'prefill', 'tokens'],
  properties: {
    generated_text: { type: 'string' },
    finish_reason: FINISH_REASON,
    generated_tokens: { type: 'integer' },
    seed: { type: ['integer', 'null'] },
    prefill: { type: 'array', items: INPUT_TOKEN },
    tokens: { type: 'array', items: TOKEN },
  },
}

const DETAILS = {
  type: 'object',
  required: ['finish_reason', 'prompt_tokens', 'generated_tokens', 'skipped_tokens', 'prefill', 'tokens'],
  properties: {
    finish_reason: FINISH_REASON,
    prompt_tokens: { type: 'integer' },
    generated_tokens: { type: 'integer' },
    skipped_tokens: { type: 'integer' },
    seed: { type: ['integer', 'null'] },
    prefill: { type: 'array', items: INPUT_TOKEN },
    tokens: { type: 'array', items: TOKEN },
    best_of_sequences: nullable({ type: 'array', items: BEST_OF_SEQUENCE }),
  },
}

const RESPONSE = {
  type: 'object',
  required: ['generated_text'],
  properties: { generated_text: { type: 'string' }, details: nullable(DETAILS) },
}

/**
 * What `Client.generate` parses from a 200: the JSON payload, of which it reads `payload[0]` as a
 * `Response` (LoRAX's root route answers a one-element list).
 */
export const GENERATE_PAYLOAD = { type: 'array', minItems: 1, maxItems: 1, items: RESPONSE }

/** `StreamResponse`: one `data:` event of a stream. */
export const STREAM_RESPONSE = {
  type: 'object',
  required: ['token'],
  properties: {
    token: TOKEN,
    generated_text: { type: ['string', 'null'] },
    details: nullable({
      type: 'object',
      required: ['finish_reason', 'prompt_tokens', 'generated_tokens'],
      properties: {
        finish_reason: FINISH_REASON,
        prompt_tokens: { type: 'integer' },
        generated_tokens: { type: 'integer' },
        seed: { type: ['integer', 'null'] },
      },
    }),
  },
}

/**
 * What `lorax.errors.parse_error` reads from an error body or an error event: `payload.get`
 * (so an object) of `error` (the message) and `error_type` (`validation`, `generation`,
 * `overloaded`, `incomplete_generation` pick the exception class; otherwise the status does).
 */
export const ERROR_PAYLOAD = {
  type: 'object',
  required: ['error', 'error_type'],
  properties: { error: { type: 'string', minLength: 1 }, error_type: { type: 'string', minLength: 1 } },
}
