import type { ChatMessage } from '../../contracts/template-engine.ts'
import { fieldError } from '../../errors/index.ts'
import type { GenerationRequest } from '../../generation/generation-request.ts'
import {
  expectObject,
  optionalBoolean,
  optionalNumber,
  optionalString,
  rejectUnknownKeys,
} from '../../validation/fields.ts'
import { parseResponseFormat } from '../parse-response-format.ts'
import { openAiBody } from './openai-body.ts'
import { COMMON_FIELDS, parseOpenAiCommon, type OpenAiCommon, type OpenAiParseContext } from './parse-openai-common.ts'

/** OpenAI fields this server cannot honour: refused when set, ignored when absent or null. */
const UNSUPPORTED_FIELDS = ['tools', 'tool_choice', 'functions', 'function_call']
const CHAT_FIELDS = new Set([
  ...COMMON_FIELDS,
  ...UNSUPPORTED_FIELDS,
  'messages',
  'max_completion_tokens',
  'top_logprobs',
  'response_format',
])
const ROLES = new Set(['system', 'developer', 'user', 'assistant'])

export interface ChatRequest extends OpenAiCommon {
  readonly logprobs: boolean
  readonly topLogprobs: number
  readonly generation: GenerationRequest
}

/** Flatten `content` (a string or text parts) into the string a chat template expects. */
function messageContent(raw: unknown, path: string): string {
  if (typeof raw === 'string') return raw
  if (!Array.isArray(raw)) throw fieldError(path, 'must be a string or an array of content parts', raw)
  return raw
    .map((part, i) => {
      const p = expectObject(part, `${path}[${i}]`)
      if (p.type !== 'text')
        throw fieldError(`${path}[${i}].type`, 'must be "text" (this model reads text only)', p.type)
      if (typeof p.text !== 'string') throw fieldError(`${path}[${i}].text`, 'must be a string', p.text)
      return p.text
    })
    .join('')
}

function parseMessages(raw: unknown): ChatMessage[] {
  if (!Array.isArray(raw) || raw.length === 0)
    throw fieldError('messages', 'must be a non-empty array of messages', raw)
  return raw.map((entry, i) => {
    const path = `messages[${i}]`
    const m = expectObject(entry, path)
    const role = optionalString(m, 'role', `${path}.role`)
    if (role === undefined || !ROLES.has(role)) {
      throw fieldError(`${path}.role`, 'must be one of "system", "developer", "user", "assistant"', m.role)
    }
    if (m.tool_calls !== undefined && m.tool_calls !== null)
      throw fieldError(`${path}.tool_calls`, 'is not supported by this server', m.tool_calls)
    const name = optionalString(m, 'name', `${path}.name`)
    const content = messageContent(m.content, `${path}.content`)
    // OpenAI renamed `system` to `developer`; chat templates written for open models know only
    // `system` (many raise on any other role), so both reach the template as `system`.
    const templateRole = (role === 'developer' ? 'system' : role) as ChatMessage['role']
    return name === undefined ? { role: templateRole, content } : { role: templateRole, content, name }
  })
}

/** Parse a `/v1/chat/completions` body. */
export function parseChatBody(raw: unknown, ctx: OpenAiParseContext): ChatRequest {
  const body = openAiBody(raw)
  for (const field of UNSUPPORTED_FIELDS) {
    if (body[field] !== undefined) throw fieldError(field, 'is not supported by this server', body[field])
  }
  rejectUnknownKeys(body, CHAT_FIELDS, '')
  const tokensField = body.max_completion_tokens !== undefined ? 'max_completion_tokens' : 'max_tokens'
  // Chat has no default length: OpenAI generates up to the context limit.
  const common = parseOpenAiCommon(body, ctx, tokensField, null)
  const logprobs = optionalBoolean(body, 'logprobs', 'logprobs') ?? false
  const topLogprobs =
    optionalNumber(body, 'top_logprobs', 'top_logprobs', { integer: true, min: 0, max: ctx.limits.maxTopLogprobs }) ?? 0
  if (topLogprobs > 0 && !logprobs) throw fieldError('top_logprobs', 'requires `logprobs: true`', topLogprobs)
  return {
    ...common,
    logprobs,
    topLogprobs,
    generation: {
      ...common.generation,
      prompt: parseMessages(body.messages),
      responseFormat: parseResponseFormat(body.response_format, 'response_format'),
      topLogprobs,
      prefillLogprobs: false,
    },
  }
}
