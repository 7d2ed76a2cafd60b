/**
 * Every mapping from a core request to the executor's: sampling fields, greedy, end ids and stop
 * words, streaming, LoRA and guided decoding parts; finish reasons back; and what is refused.
 */
import t from 'tap'
import { GREEDY_SAMPLING, LoomError, type BackendRequest } from '@loom/core'
import {
  checkSupported,
  guidedJsonSchema,
  toFinishReason,
  toNativeRequest,
  toNativeSampling,
} from '../src/request-mapping.ts'

function request(overrides: Partial<BackendRequest> = {}): BackendRequest {
  return {
    id: 'req-1',
    inputIds: [5, 6, 7],
    maxNewTokens: 20,
    sampling: GREEDY_SAMPLING,
    eosTokenIds: [2],
    adapter: null,
    speculator: null,
    grammar: null,
    topLogprobs: 0,
    prefillLogprobs: false,
    signal: new AbortController().signal,
    ...overrides,
  }
}

const sampled = {
  temperature: 0.7,
  topK: 40,
  topP: 0.9,
  typicalP: 1,
  repetitionPenalty: 1.1,
  frequencyPenalty: 0.5,
  presencePenalty: -0.25,
  seed: 18446744073709551615n,
}

t.test('sampling fields map one to one; the core\'s "off" values become the executor\'s', async (t) => {
  t.same(toNativeSampling(request({ sampling: sampled })), {
    topK: 40,
    topP: 0.9,
    temperature: 0.7,
    repetitionPenalty: 1.1,
    presencePenalty: -0.25,
    frequencyPenalty: 0.5,
    seed: 18446744073709551615n,
  })
  // top_p 1 is "off" in the core and 0 in TensorRT-LLM; top_k 0 is "off" in both.
  t.match(toNativeSampling(request({ sampling: { ...sampled, topP: 1, topK: 0 } })), { topP: 0, topK: 0 })
})

t.test('greedy is top-1 at temperature 1 (the executor needs a positive temperature), with no seed', async (t) => {
  t.same(toNativeSampling(request({ sampling: { ...GREEDY_SAMPLING, seed: 9n, repetitionPenalty: 1.2 } })), {
    topK: 1,
    topP: 0,
    temperature: 1,
    repetitionPenalty: 1.2,
    presencePenalty: 0,
    frequencyPenalty: 0,
  })
})

t.test('the whole request: prompt, max tokens, streaming, log probs, client id', async (t) => {
  const native = toNativeRequest(request({ maxNewTokens: 33 }), { clientId: 12 })
  t.type(native.inputIds, Int32Array)
  t.same(Array.from(native.inputIds), [5, 6, 7])
  t.equal(native.maxTokens, 33)
  t.equal(native.streaming, true, 'always streams: the core consumes events')
  t.equal(native.returnLogProbs, true)
  t.equal(native.clientId, 12)
  t.notOk('lora' in native)
  t.notOk('guidedJsonSchema' in native)
})

t.test('end ids: the first is the end id (and pad id), the others one-token stop words', async (t) => {
  const one = toNativeRequest(request({ eosTokenIds: [2] }), { clientId: 1 })
  t.equal(one.endId, 2)
  t.equal(one.padId, 2)
  t.notOk('stopWords' in one)
  const three = toNativeRequest(request({ eosTokenIds: [128001, 128008, 128009] }), { clientId: 1 })
  t.equal(three.endId, 128001)
  t.same(
    three.stopWords?.map((w) => Array.from(w)),
    [[128008], [128009]],
  )
  t.ok(three.stopWords?.every((w) => w instanceof Int32Array))
  // ignore_eos: nothing ends the request but max tokens.
  const none = toNativeRequest(request({ eosTokenIds: [] }), { clientId: 1 })
  t.notOk('endId' in none)
  t.notOk('stopWords' in none)
})

t.test('LoRA and guided decoding parts are passed through', async (t) => {
  const lora = { taskId: 77 }
  const native = toNativeRequest(request(), { clientId: 1, lora, guidedJsonSchema: '{"type":"object"}' })
  t.equal(native.lora, lora)
  t.equal(native.guidedJsonSchema, '{"type":"object"}')
})

t.test('guided decoding gets the schema, or any object for json_object', async (t) => {
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }
  t.equal(guidedJsonSchema({ type: 'json_schema', name: 'x', schema, strict: true }), JSON.stringify(schema))
  t.equal(guidedJsonSchema({ type: 'json_object', schema }), JSON.stringify(schema))
  t.equal(guidedJsonSchema({ type: 'json_object' }), '{"type":"object"}')
})

t.test('finish reasons', async (t) => {
  t.equal(toFinishReason('end_id'), 'eos_token')
  t.equal(toFinishReason('stop_words'), 'eos_token', 'our stop words are the extra end ids')
  t.equal(toFinishReason('length'), 'length')
  t.equal(toFinishReason('timed_out'), 'length')
  t.equal(toFinishReason('cancelled'), 'cancelled')
  t.equal(toFinishReason('error'), null)
  t.equal(toFinishReason('not_finished'), null)
})

t.test('what the executor cannot do is refused with a clear error', async (t) => {
  const code = (fn: () => void): string | undefined => {
    try {
      fn()
      return undefined
    } catch (err) {
      return err instanceof LoomError ? `${err.code}: ${err.message}` : String(err)
    }
  }
  t.equal(
    code(() => checkSupported(request(), false)),
    undefined,
  )
  t.match(
    code(() => checkSupported(request({ sampling: { ...sampled, typicalP: 0.5 } }), false)),
    /^bad_request: .*typical_p/,
  )
  t.match(
    code(() => checkSupported(request({ topLogprobs: 3 }), false)),
    /^bad_request: .*alternative tokens/,
  )
  t.match(
    code(() => checkSupported(request({ prefillLogprobs: true }), false)),
    /^bad_request: .*prompt log prob/,
  )
  const grammar = { type: 'json_object' } as const
  t.match(
    code(() => checkSupported(request({ grammar }), false)),
    /^grammar_unsupported: .*guided_decoding/,
  )
  t.equal(
    code(() => checkSupported(request({ grammar }), true)),
    undefined,
  )
})
