import { expectObject, type Body } from '../../validation/fields.ts'

/**
 * The request body as an object, with fields whose value is `null` left out. The OpenAI SDKs send
 * `null` for an optional field a caller set to null (`tools: null`, `max_completion_tokens: null`),
 * and OpenAI reads that as "not set"; dropping them once here means every later check, including
 * the unknown-field check and the "not supported" ones, sees such a field as absent.
 */
export function openAiBody(raw: unknown): Body {
  const body = expectObject(raw, 'body')
  return Object.fromEntries(Object.entries(body).filter(([, value]) => value !== null))
}
