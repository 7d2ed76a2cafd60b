import { LoomError, describeValue, fieldError, isLoomError } from '../errors/loom-error.ts'
import { redactSecrets } from '../logging/redact-secrets.ts'

/** What `toLoomError` needs to know about the request an error belongs to. */
export interface ErrorContext {
  /** Quoted in `internal_error` messages so a user can report it and an operator can find the log. */
  readonly requestId: string
  /** The body limit in bytes that applied to the request. */
  readonly bodyLimit: number
  /** The request's Content-Type header, if any. */
  readonly contentType?: string | undefined
  /** The parsed body, to quote the received value in schema validation errors. */
  readonly body?: unknown
}

/** One issue of a fastify (ajv) schema validation error. */
interface SchemaIssue {
  readonly keyword?: string
  readonly instancePath?: string
  readonly message?: string
  readonly params?: Record<string, unknown>
}

interface FrameworkError {
  readonly code?: unknown
  readonly statusCode?: unknown
  readonly validation?: unknown
  readonly validationContext?: unknown
}

/**
 * Turn anything a route, hook or fastify itself threw into a `LoomError`:
 * - a `LoomError` is returned as it is;
 * - fastify's body errors become `invalid_json` (400), `unsupported_media_type` (415) and
 *   `body_too_large` (413, naming the limit); schema validation errors become `validation_error`
 *   (422) naming the field, the rule and the value received;
 * - other client errors (a 4xx `statusCode`) become `bad_request`;
 * - anything else becomes `internal_error` quoting only the request id: its message and stack may
 *   hold internals and are for the log, never the client.
 */
export function toLoomError(err: unknown, context: ErrorContext): LoomError {
  if (isLoomError(err)) return err
  const fw: FrameworkError = typeof err === 'object' && err !== null ? (err as FrameworkError) : {}
  switch (fw.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new LoomError('invalid_json', { detail: 'syntax error' }, { cause: err })
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new LoomError('invalid_json', { detail: 'the body is empty' }, { cause: err })
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new LoomError('unsupported_media_type', { received: describeContentType(context.contentType) })
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new LoomError('body_too_large', { limit: context.bodyLimit })
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new LoomError('bad_request', { detail: 'the body size does not match Content-Length' })
  }
  if (Array.isArray(fw.validation) && fw.validation.length > 0) {
    return schemaIssueToError(fw.validation[0] as SchemaIssue, String(fw.validationContext ?? 'body'), context.body)
  }
  const status = typeof fw.statusCode === 'number' ? fw.statusCode : 500
  if (err instanceof SyntaxError && status === 400) {
    // fastify's JSON parser rejecting `__proto__` or `constructor.prototype` keys.
    return new LoomError('invalid_json', { detail: 'forbidden key (__proto__ or constructor.prototype)' })
  }
  if (status >= 400 && status < 500 && err instanceof Error) {
    return new LoomError('bad_request', { detail: redactSecrets(err.message).slice(0, 200) })
  }
  return new LoomError('internal_error', { detail: `request id ${context.requestId}` }, { cause: err })
}

function describeContentType(contentType: string | undefined): string {
  if (contentType === undefined || contentType === '') return '(none)'
  return describeValue(redactSecrets(contentType))
}

/** `/messages/0/content` in `body` → `messages[0].content`; other parts are prefixed with their name. */
function fieldName(instancePath: string, extra: unknown, part: string): string {
  const segments = instancePath.split('/').filter((s) => s !== '')
  if (typeof extra === 'string' && extra !== '') segments.push(extra)
  let name = part === 'body' ? '' : part
  for (const segment of segments) {
    const decoded = segment.replace(/~1/g, '/').replace(/~0/g, '~')
    name += /^\d+$/.test(decoded) ? `[${decoded}]` : name === '' ? decoded : `.${decoded}`
  }
  return name === '' ? part : name
}

function valueAt(root: unknown, instancePath: string): unknown {
  let value = root
  for (const segment of instancePath.split('/').filter((s) => s !== '')) {
    if (value === null || typeof value !== 'object') return undefined
    value = (value as Record<string, unknown>)[segment.replace(/~1/g, '/').replace(/~0/g, '~')]
  }
  return value
}

function schemaIssueToError(issue: SchemaIssue, part: string, body: unknown): LoomError {
  const path = issue.instancePath ?? ''
  const params = issue.params ?? {}
  if (issue.keyword === 'required') {
    return fieldError(fieldName(path, params.missingProperty, part), 'is required', undefined)
  }
  if (issue.keyword === 'additionalProperties') {
    const extra = params.additionalProperty
    return fieldError(fieldName(path, extra, part), 'is not a known field', valueAt(body, `${path}/${String(extra)}`))
  }
  const received = part === 'body' ? valueAt(body, path) : undefined
  return fieldError(fieldName(path, undefined, part), issue.message ?? 'is invalid', received)
}
