/**
 * A core `BackendRequest` → the addon's `NativeRequest` (TensorRT-LLM's `Request` with its
 * `SamplingConfig`, `OutputConfig`, end id, stop words and `LoraConfig`), and the executor's finish
 * reasons back to the core's. Pure functions: the backend adds the LoRA part and owns the request.
 */
import { LoomError, type BackendFinishReason, type BackendRequest, type ResponseFormat } from '@loom/core'
import type { NativeFinishReason, NativeLora, NativeRequest, NativeSampling } from './native-api.ts'

/**
 * Refuse what TensorRT-LLM's executor cannot do, before anything is queued. The core has already
 * range-checked every field; these are features, not ranges.
 */
export function checkSupported(request: BackendRequest, guidedDecoding: boolean): void {
  const refuse = (detail: string): never => {
    throw new LoomError('bad_request', { detail: `${detail} (not available with the TensorRT-LLM backend)` })
  }
  if (request.sampling.typicalP !== 1) refuse('typical_p')
  // The executor returns the chosen token's log probability only, and no prompt log probabilities
  // unless the engine was built to gather context logits.
  if (request.topLogprobs > 0) refuse('alternative tokens per position (top_n_tokens, top_logprobs)')
  if (request.prefillLogprobs) refuse('prompt log probabilities (decoder_input_details, echo with logprobs)')
  if (request.grammar !== null && !guidedDecoding) {
    throw new LoomError('grammar_unsupported', {
      detail:
        'this server runs TensorRT-LLM without guided decoding (set `guided_decoding: true` on a TensorRT-LLM build that has it)',
    })
  }
}

/**
 * TensorRT-LLM's sampling for the core's. Greedy (temperature 0) is `topK 1` at temperature 1: the
 * executor needs a positive temperature, and top-1 takes the argmax whatever the temperature; it
 * draws nothing at random, so no seed is sent (the core gives every request one). Repetition,
 * presence and frequency penalties go to the executor's fields of the same names.
 */
export function toNativeSampling(request: BackendRequest): NativeSampling {
  const s = request.sampling
  const greedy = s.temperature === 0
  return {
    topK: greedy ? 1 : s.topK,
    // The core's "off" is 1; the executor's is 0.
    topP: greedy || s.topP >= 1 ? 0 : s.topP,
    temperature: greedy ? 1 : s.temperature,
    repetitionPenalty: s.repetitionPenalty,
    presencePenalty: s.presencePenalty,
    frequencyPenalty: s.frequencyPenalty,
    ...(greedy ? {} : { seed: s.seed }),
  }
}

/**
 * The whole request. The executor takes one end id: the first of the model's end tokens; the others
 * become one-token stop words, which end the request the same way (reported as `stop_words`, mapped
 * back to `eos_token`). With `ignore_eos` (no end tokens) no end id is sent. Requests always stream:
 * the core consumes events either way. Stop *sequences* are not sent: the core matches them on the
 * decoded text (a stop string can end mid-token) and leaves the stream, which cancels the request.
 */
export function toNativeRequest(
  request: BackendRequest,
  extra: { readonly clientId: number; readonly lora?: NativeLora; readonly guidedJsonSchema?: string },
): NativeRequest {
  const [endId, ...otherEnds] = request.eosTokenIds
  return {
    inputIds: Int32Array.from(request.inputIds),
    maxTokens: request.maxNewTokens,
    streaming: true,
    sampling: toNativeSampling(request),
    ...(endId !== undefined ? { endId, padId: endId } : {}),
    ...(otherEnds.length > 0 ? { stopWords: otherEnds.map((id) => Int32Array.of(id)) } : {}),
    clientId: extra.clientId,
    returnLogProbs: true,
    ...(extra.lora !== undefined ? { lora: extra.lora } : {}),
    ...(extra.guidedJsonSchema !== undefined ? { guidedJsonSchema: extra.guidedJsonSchema } : {}),
  }
}

/**
 * The JSON schema TensorRT-LLM's guided decoding gets for a `response_format`: the request's schema,
 * or any JSON object for `json_object` without one.
 */
export function guidedJsonSchema(format: ResponseFormat): string {
  if (format.type === 'json_schema' || format.schema !== undefined) return JSON.stringify(format.schema)
  return JSON.stringify({ type: 'object' })
}

/**
 * The core's finish reason for a final response's, or null for an error response (the backend turns
 * it into an error). The executor stops on our stop words only for the extra end tokens, so
 * `stop_words` is an end of sequence too; `timed_out` cannot happen (no allotted time is sent) and
 * is reported as `length`, the nearest meaning: the executor cut the output short.
 */
export function toFinishReason(reason: NativeFinishReason): BackendFinishReason | null {
  switch (reason) {
    case 'end_id':
    case 'stop_words':
      return 'eos_token'
    case 'length':
    case 'timed_out':
      return 'length'
    case 'cancelled':
      return 'cancelled'
    case 'not_finished':
    case 'error':
      return null
  }
}
