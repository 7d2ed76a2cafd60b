import { LoomError } from '@loom/core'

/** Error names S3 uses when the server's own credentials are wrong, not the caller's. */
const CREDENTIAL_ERRORS = new Set([
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'ExpiredToken',
  'InvalidToken',
  'TokenRefreshRequired',
  'CredentialsProviderError',
])
const NOT_FOUND_ERRORS = new Set(['NoSuchBucket', 'NoSuchKey', 'NotFound'])
const FORBIDDEN_ERRORS = new Set(['AccessDenied', 'AllAccessDisabled', 'Forbidden'])
/** S3 answers that say "try again": throttling and server-side timeouts. */
const TRANSIENT_ERRORS = new Set(['SlowDown', 'RequestTimeout', 'InternalError', 'ServiceUnavailable', 'Throttling'])
/** Socket-level failures worth another try. */
const TRANSIENT_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EAI_AGAIN',
  'ENOTFOUND',
  'ECONNABORTED',
])

/** How the S3 source treats one failure. */
export type S3FailureKind = 'not_found' | 'forbidden' | 'credentials' | 'changed' | 'transient' | 'final'

interface SdkErrorShape {
  readonly name?: string
  readonly code?: string
  readonly message?: string
  readonly $metadata?: { readonly httpStatusCode?: number }
}

/** Classify an error thrown by the SDK, a socket or a stream. */
export function classifyS3Error(err: unknown): S3FailureKind {
  const e = (err ?? {}) as SdkErrorShape
  const name = e.name ?? ''
  const status = e.$metadata?.httpStatusCode
  if (CREDENTIAL_ERRORS.has(name)) return 'credentials'
  if (NOT_FOUND_ERRORS.has(name) || status === 404) return 'not_found'
  if (FORBIDDEN_ERRORS.has(name) || status === 403) return 'forbidden'
  if (name === 'PreconditionFailed' || status === 412) return 'changed'
  if (TRANSIENT_ERRORS.has(name) || (status !== undefined && (status >= 500 || status === 429))) return 'transient'
  if (name === 'TimeoutError' || TRANSIENT_CODES.has(e.code ?? '')) return 'transient'
  // No HTTP status at all: the request never got an answer (socket closed, truncated body). A
  // TypeError or RangeError is a bug, and retrying it would only hide it.
  if (err instanceof TypeError || err instanceof RangeError) return 'final'
  if (status === undefined && name !== 'AbortError') return 'transient'
  return 'final'
}

/** Whether a retry may help. */
export function isTransientS3Error(err: unknown): boolean {
  return classifyS3Error(err) === 'transient'
}

/** A short, secret-free description: the S3 error name and its message, or the socket error code. */
export function describeS3Error(err: unknown): string {
  const e = (err ?? {}) as SdkErrorShape & { cause?: SdkErrorShape }
  const status = e.$metadata?.httpStatusCode
  const parts = [e.name && e.name !== 'Error' ? e.name : undefined, e.code, e.message, e.cause?.code]
  const text = [...new Set(parts.filter((p): p is string => typeof p === 'string' && p !== ''))].join(': ')
  return status === undefined ? text || 'unknown error' : `HTTP ${status} ${text}`.trim()
}

/**
 * Turn a failure while listing (resolve) into the error the client sees. Wrong server credentials
 * are the operator's problem, so they are reported as the source being unavailable, not as the
 * caller's 401.
 */
export function listingError(err: unknown, source: string, id: string, where: string): LoomError {
  const detail = describeS3Error(err)
  switch (classifyS3Error(err)) {
    case 'not_found':
      return new LoomError('adapter_not_found', { id, source }, { cause: err })
    case 'forbidden':
      return new LoomError(
        'auth_forbidden',
        { id, detail: `the server's S3 credentials may not list ${where} (${detail})` },
        { cause: err },
      )
    case 'credentials':
      return new LoomError(
        'adapter_source_unavailable',
        {
          source,
          id,
          detail: `S3 refused the server's credentials (${detail}); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`,
        },
        { cause: err },
      )
    default:
      return new LoomError('adapter_source_unavailable', { source, id, detail }, { cause: err })
  }
}
