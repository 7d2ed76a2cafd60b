import type { BackendCapabilities } from '../contracts/backend.ts'
import type { ValidConfig } from '../config/index.ts'
import { LoomError } from '../errors/index.ts'
import type { RequestLimits } from '../generation/generation-request.ts'

/**
 * Request limits from the config and the model: `max_total_tokens` defaults to the model's context
 * length and may not exceed it; `max_input_length` defaults to one less.
 */
export function resolveLimits(config: ValidConfig, capabilities: BackendCapabilities): RequestLimits {
  const context = capabilities.maxContextLength
  const maxTotalTokens = config.limits.max_total_tokens ?? context
  if (maxTotalTokens > context) {
    throw new LoomError('config_invalid', {
      file: config.file,
      path: 'limits.max_total_tokens',
      expected: `must be <= the model's context length ${context}`,
      received: maxTotalTokens,
    })
  }
  const maxInputLength = config.limits.max_input_length ?? maxTotalTokens - 1
  if (maxInputLength >= maxTotalTokens) {
    throw new LoomError('config_invalid', {
      file: config.file,
      path: 'limits.max_input_length',
      expected: `must be < limits.max_total_tokens (${maxTotalTokens})`,
      received: maxInputLength,
    })
  }
  return {
    maxInputLength,
    maxTotalTokens,
    maxStopSequences: config.limits.max_stop_sequences,
    maxTopLogprobs: 20,
    maxSequences: config.limits.max_concurrent_requests,
  }
}
