import { AdapterSource, definePlugin, z } from '@loom/core'
import { S3AdapterSource, type S3Credentials } from './s3-source.ts'

/** The `options:` block of this plugin. Documented in README.md. */
export const S3SourceOptions = z
  .strictObject({
    /** The `adapter_source` code requests use. */
    name: z.string().min(1).default('s3'),
    /** S3-compatible endpoint (MinIO, R2, Ceph); default: env `S3_ENDPOINT_URL`, else AWS. */
    endpoint: z.url({ protocol: /^https?$/ }).optional(),
    /** Region; default: env `AWS_REGION`, then `AWS_DEFAULT_REGION`, then `us-east-1`. */
    region: z.string().min(1).optional(),
    /** Path-style URLs (`endpoint/bucket/key`); default: true when an endpoint is set. */
    force_path_style: z.boolean().optional(),
    /** Tries per S3 request (listing, each file), with exponential backoff. */
    max_attempts: z.number().int().min(1).max(20).default(5),
    /** First backoff wait in milliseconds, doubled per try. */
    retry_base_ms: z.number().int().min(0).default(250),
    /** Limit for listing one adapter folder, retries included. */
    list_timeout_ms: z.number().int().positive().default(30_000),
    /** Idle limit of one S3 socket: a transfer that stalls this long is retried. */
    request_timeout_ms: z.number().int().positive().default(60_000),
  })
  .prefault({})

/**
 * Read the server's credentials from the environment. Missing ones are not a startup error: the
 * server goes on serving every other source, and requests for S3 adapters get an error naming the
 * variables (a warning at startup says so too).
 */
export function credentialsFromEnv(env: NodeJS.ProcessEnv): S3Credentials | { missing: string } {
  const accessKeyId = env.AWS_ACCESS_KEY_ID
  const secretAccessKey = env.AWS_SECRET_ACCESS_KEY
  const unset = [
    accessKeyId ? undefined : 'AWS_ACCESS_KEY_ID',
    secretAccessKey ? undefined : 'AWS_SECRET_ACCESS_KEY',
  ].filter((name) => name !== undefined)
  if (!accessKeyId || !secretAccessKey) {
    return {
      missing: `the server has no S3 credentials: set ${unset.join(' and ')} (and AWS_SESSION_TOKEN for temporary credentials) in its environment`,
    }
  }
  const sessionToken = env.AWS_SESSION_TOKEN
  return sessionToken ? { accessKeyId, secretAccessKey, sessionToken } : { accessKeyId, secretAccessKey }
}

/** Serves adapters from S3 or an S3-compatible store (`adapter_source: s3`, ids `s3://bucket/path`). */
export default definePlugin({
  name: '@loom/source-s3',
  provides: ['AdapterSource'],
  options: S3SourceOptions,
  register(ctx, options) {
    const env = process.env
    const endpoint = options.endpoint ?? (env.S3_ENDPOINT_URL || undefined)
    const region = options.region ?? (env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1')
    const credentials = credentialsFromEnv(env)
    const missing = 'missing' in credentials ? credentials.missing : undefined
    const source = new S3AdapterSource({
      name: options.name,
      ...(endpoint === undefined ? {} : { endpoint }),
      region,
      forcePathStyle: options.force_path_style ?? endpoint !== undefined,
      ...(missing === undefined ? { credentials: credentials as S3Credentials } : { missingCredentials: missing }),
      retry: { attempts: options.max_attempts, baseMs: options.retry_base_ms },
      listTimeoutMs: options.list_timeout_ms,
      requestTimeoutMs: options.request_timeout_ms,
      maxListPages: 10,
    })
    ctx.provide(AdapterSource, source)
    ctx.onClose(() => source.close())
    const where = endpoint === undefined ? `AWS ${region}` : new URL(endpoint).host
    if (missing !== undefined) ctx.logger.warn({ source: options.name }, `S3 adapter source: ${missing}`)
    else ctx.logger.info({ source: options.name, endpoint: where }, 'S3 adapter source ready')
  },
})
