import { LoomError } from '@loom/core'

/** Where an adapter lives in S3: a bucket and a key prefix ending with `/`. */
export interface S3Location {
  /**
   * The one spelling of the id (`s3://bucket/path`, no trailing `/`): what resolve() returns, so
   * every accepted spelling shares one cache entry, one download and one loaded adapter.
   */
  readonly id: string
  readonly bucket: string
  /** The key prefix the adapter's files share, always ending with `/` (`adapters/poet/`). */
  readonly prefix: string
}

/** Bucket names as S3 allows them (3–63 lower-case letters, digits, `.`, `-`). */
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/
/** S3 also refuses names shaped like an IPv4 address (`192.168.5.4`) or with adjacent periods. */
const NOT_BUCKET = /^\d+\.\d+\.\d+\.\d+$|\.\./
/** One key segment: printable, no `/`, and not a `.`/`..` path step. */
const KEY_SEGMENT = /^[^/\\\x00-\x1f\x7f]+$/

const EXPECTED = 'expected s3://<bucket>/<path>, for example s3://my-adapters/loras/poet'

/**
 * Parse `s3://<bucket>/<path>` (a trailing `/` is optional). The path must name a folder, not the
 * bucket root, and has no empty, `.` or `..` segments, so the only two spellings of one adapter
 * are with and without the trailing `/`, and both parse to the same `id`.
 */
export function parseS3AdapterId(id: string, source: string): S3Location {
  const invalid = (detail: string) => new LoomError('adapter_id_invalid', { id, source, detail })
  if (!id.startsWith('s3://')) throw invalid(EXPECTED)
  const rest = id.slice('s3://'.length)
  const slash = rest.indexOf('/')
  if (slash < 0) throw invalid(`${EXPECTED} (the path inside the bucket is missing)`)
  const bucket = rest.slice(0, slash)
  if (!BUCKET.test(bucket) || NOT_BUCKET.test(bucket)) {
    throw invalid(`${EXPECTED} (\`${bucket}\` is not a valid bucket name)`)
  }
  const path = rest.slice(slash + 1).replace(/\/$/, '')
  if (path === '') throw invalid(`${EXPECTED} (the path inside the bucket is missing)`)
  const segments = path.split('/')
  if (segments.some((s) => !KEY_SEGMENT.test(s) || s === '.' || s === '..')) {
    throw invalid(`${EXPECTED} (the path has an empty, \`.\` or \`..\` segment or a control character)`)
  }
  return { id: `s3://${bucket}/${path}`, bucket, prefix: `${path}/` }
}
