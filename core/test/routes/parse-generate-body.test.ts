import t from 'tap'
import { compatStream, parseGenerateBody } from '../../src/routes/native/parse-generate-body.ts'

const limits = { maxInputLength: 100, maxTotalTokens: 128, maxStopSequences: 2, maxTopLogprobs: 5 }
const parse = (body: unknown, stream = false, bearerToken?: string) =>
  parseGenerateBody(body, { stream, bearerToken, defaultSource: 'hub', limits })

t.test('defaults: greedy, no adapter, details off', async (t) => {
  const r = parse({ inputs: 'hi' })
  t.equal(r.generation.sampling.temperature, 0)
  t.equal(r.generation.adapter, null)
  t.equal(r.generation.maxNewTokens, null)
  t.equal(r.details, false)
})

t.test('sampling turns on with do_sample or any warper; temperature 0 is greedy', async (t) => {
  t.equal(parse({ inputs: 'x', parameters: { do_sample: true } }).generation.sampling.temperature, 1)
  t.equal(parse({ inputs: 'x', parameters: { top_p: 0.9 } }).generation.sampling.topP, 0.9)
  t.equal(parse({ inputs: 'x', parameters: { temperature: 0.7 } }).generation.sampling.temperature, 0.7)
  t.equal(parse({ inputs: 'x', parameters: { temperature: 0, do_sample: true } }).generation.sampling.temperature, 0)
})

t.test('adapter fields: default source, empty id is base, api_token wins over Bearer', async (t) => {
  const a = parse({ inputs: 'x', parameters: { adapter_id: 'me/a' } }, false, 'bearer-tok')
  t.same(a.generation.adapter, { source: 'hub', id: 'me/a' })
  t.equal(a.generation.apiToken, 'bearer-tok')
  const b = parse({ inputs: 'x', parameters: { adapter_id: 'me/a', api_token: 'body-tok' } }, false, 'bearer-tok')
  t.equal(b.generation.apiToken, 'body-tok')
  t.equal(parse({ inputs: 'x', parameters: { adapter_id: '' } }).generation.adapter, null)
})

t.test('errors name the field, the rule and the value received', async (t) => {
  const cases: [unknown, string][] = [
    [{}, 'Input validation error: `inputs` is required (a string); received nothing'],
    [{ inputs: '' }, 'Input validation error: `inputs` cannot be empty; received ""'],
    [
      { inputs: 'x', parameters: { top_p: 1.5 } },
      'Input validation error: `parameters.top_p` must be a number > 0 and <= 1; received 1.5',
    ],
    [
      { inputs: 'x', parameters: { max_new_tokens: 0 } },
      'Input validation error: `parameters.max_new_tokens` must be an integer > 0 and <= 128; received 0',
    ],
    [
      { inputs: 'x', parameters: { temperature: 'hot' } },
      'Input validation error: `parameters.temperature` must be a number >= 0 and <= 100; received "hot"',
    ],
    [
      { inputs: 'x', parameters: { stop: ['a', 'b', 'c'] } },
      'Input validation error: `parameters.stop` must have at most 2 entries; received ["a","b","c"]',
    ],
    [
      { inputs: 'x', parameters: { max_new_token: 5 } },
      'Input validation error: `parameters.max_new_token` is not a known field; received 5',
    ],
    [
      { inputs: 'x', parameters: { truncate: 1000 } },
      'Input validation error: `parameters.truncate` must be an integer >= 1 and <= 100; received 1000',
    ],
    [
      { inputs: 'x', parameters: { repetition_penalty: 0 } },
      'Input validation error: `parameters.repetition_penalty` must be a number > 0; received 0',
    ],
    [
      { inputs: 'x', parameters: { seed: -1 } },
      'Input validation error: `parameters.seed` must be an integer >= 0 and <= 9007199254740991; received -1',
    ],
  ]
  for (const [body, message] of cases) {
    t.throws(() => parse(body), { code: 'validation_error', message }, message)
  }
  t.throws(() => parse({ inputs: 'x', parameters: { decoder_input_details: true } }, true), {
    message: /`parameters.decoder_input_details` is not supported when streaming/,
    param: 'parameters.decoder_input_details',
  })
})

t.test('response_format: json_object, json_schema (OpenAI and LoRAX forms), bad type', async (t) => {
  t.same(parse({ inputs: 'x', parameters: { response_format: { type: 'json_object' } } }).generation.responseFormat, {
    type: 'json_object',
  })
  const schema = { type: 'object', properties: { a: { type: 'string' } } }
  t.same(
    parse({ inputs: 'x', parameters: { response_format: { type: 'json_schema', schema } } }).generation.responseFormat,
    {
      type: 'json_schema',
      name: 'schema',
      schema,
      strict: true,
    },
  )
  t.throws(() => parse({ inputs: 'x', parameters: { response_format: { type: 'xml' } } }), {
    message: /`parameters.response_format.type` must be one of "text", "json_object", "json_schema"; received "xml"/,
  })
})

t.test('a malformed api_token is refused without repeating its value', async (t) => {
  const secret = 'QA-SECRET-bbbb2222'
  for (const [token, received] of [
    [[secret], 'an array (value not shown)'],
    [{ t: secret }, 'an object (value not shown)'],
    [`${secret}\r\nX-Evil: 1`, `a string of ${secret.length + 11} characters (value not shown)`],
    [`${secret}€`, `a string of ${secret.length + 1} characters (value not shown)`],
  ] as const) {
    const err = (() => {
      try {
        parse({ inputs: 'x', parameters: { adapter_id: 'me/a', api_token: token } })
      } catch (e) {
        return e as Error & { code: string; param: string }
      }
      return null
    })()
    t.match(err, { code: 'validation_error', param: 'parameters.api_token' })
    t.match(err?.message, `received ${received}`)
    t.notMatch(err?.message, secret, 'the token is not in the message')
  }
})

t.test('adapter ids and sources are bounded and free of control characters', async (t) => {
  t.throws(() => parse({ inputs: 'x', parameters: { adapter_id: 'a'.repeat(1025) } }), {
    code: 'validation_error',
    message: /`parameters.adapter_id` must be at most 1024 characters long; received "a{70,}\.\.\.$/,
  })
  t.throws(() => parse({ inputs: 'x', parameters: { adapter_id: 'kjv', adapter_source: 'd'.repeat(65) } }), {
    message: /`parameters.adapter_source` must be at most 64 characters long/,
  })
  t.throws(() => parse({ inputs: 'x', parameters: { adapter_id: 'kjv/\r\nX-Evil: 1/..' } }), {
    message: /`parameters.adapter_id` must not contain control or invisible formatting characters/,
  })
  t.throws(() => parse({ inputs: 'x', parameters: { merged_adapters: { ids: ['a', 'b\u0000'], weights: [1, 1] } } }), {
    message: /`parameters.merged_adapters.ids\[1\]` must not contain control or invisible formatting characters/,
  })
  t.same(parse({ inputs: 'x', parameters: { adapter_id: '中文/适配器' } }).generation.adapter, {
    source: 'hub',
    id: '中文/适配器',
  })
})

t.test('unsupported LoRAX options are accepted only at their default, and say they are unsupported', async (t) => {
  t.doesNotThrow(() => parse({ inputs: 'x', parameters: { best_of: 1 } }))
  t.doesNotThrow(() => parse({ inputs: 'x', parameters: { best_of: null } }))
  t.throws(() => parse({ inputs: 'x', parameters: { best_of: 2 } }), {
    message: /`parameters.best_of` is not supported by this server \(only 1, the default\); received 2/,
  })
})

t.test(
  'return_k_alternatives asks the backend for k alternatives per token, within the top_logprobs bound',
  async (t) => {
    t.equal(parse({ inputs: 'x' }).generation.topLogprobs, 0, 'none by default')
    t.equal(parse({ inputs: 'x', parameters: { return_k_alternatives: null } }).generation.topLogprobs, 0)
    t.equal(parse({ inputs: 'x', parameters: { return_k_alternatives: 0 } }).generation.topLogprobs, 0, '0 is off')
    t.equal(parse({ inputs: 'x', parameters: { return_k_alternatives: 3 } }).generation.topLogprobs, 3)
    t.equal(
      parse({ inputs: 'x', parameters: { return_k_alternatives: 5 } }, true).generation.topLogprobs,
      5,
      'streams too',
    )
    for (const bad of [6, -1, 2.5, '3', true]) {
      t.throws(() => parse({ inputs: 'x', parameters: { return_k_alternatives: bad } }), {
        code: 'validation_error',
        param: 'parameters.return_k_alternatives',
        message: new RegExp(
          `\`parameters.return_k_alternatives\` must be an integer .*5.*; received ${JSON.stringify(bad)}`,
        ),
      })
    }
  },
)

t.test(
  "compatStream reads POST /'s `stream`: absent or null is false, anything but a boolean is refused",
  async (t) => {
    t.equal(compatStream({ inputs: 'x' }), false)
    t.equal(compatStream({ inputs: 'x', stream: null }), false)
    t.equal(compatStream({ inputs: 'x', stream: false }), false)
    t.equal(compatStream({ inputs: 'x', stream: true }), true)
    t.throws(() => compatStream({ inputs: 'x', stream: 'true' }), {
      code: 'validation_error',
      param: 'stream',
      message: /`stream` must be true or false; received "true"/,
    })
    t.throws(() => compatStream([{ inputs: 'x' }]), { code: 'validation_error', message: /`body` must be/ })
  },
)

t.test('merge weights that are all 0 are refused: the merge would have no weights', async (t) => {
  t.throws(() => parse({ inputs: 'x', parameters: { merged_adapters: { ids: ['a', 'b'], weights: [0, 0] } } }), {
    param: 'parameters.merged_adapters.weights',
    message: /must not all be 0 \(the merge would have no weights\); received \[0,0\]/,
  })
})

t.test('merge weights are bounded so the merged factors stay finite', async (t) => {
  t.throws(() => parse({ inputs: 'x', parameters: { merged_adapters: { ids: ['a', 'b'], weights: [1e308, 1] } } }), {
    code: 'validation_error',
    param: 'parameters.merged_adapters.weights[0]',
    message: /between -1000000 and 1000000/,
  })
})

t.test('unknown fields that look like credentials are refused without their value', async (t) => {
  for (const [body, field] of [
    [{ inputs: 'x', api_token: 'SECRETTOP' }, 'api_token'],
    [{ inputs: 'x', parameters: { hf_token: 'hf_SECRETTOP' } }, 'parameters.hf_token'],
    [{ inputs: 'x', parameters: { api_tokn: 'SECRETTOP' } }, 'parameters.api_tokn'],
    [{ inputs: 'x', parameters: { extra: { password: 'SECRETTOP' } } }, 'parameters.extra'],
  ] as const) {
    t.throws(() => parse(body), {
      param: field,
      message: `Input validation error: \`${field}\` is not a known field; received (value not shown)`,
    })
  }
  t.throws(() => parse({ inputs: 'x', parameters: { colour: 'red' } }), { message: /received "red"$/ })
})

t.test('invisible characters in an id are refused, and echoed escaped', async (t) => {
  for (const c of ['\u007f', '\u0085', '\u2028', '\u202e', '\ufeff']) {
    t.throws(() => parse({ inputs: 'x', parameters: { adapter_id: `kjv${c}` } }), {
      message: new RegExp(`received "kjv\\\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}"$`),
    })
  }
})
