import { createHash } from 'node:crypto'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3'
import {
  DownloadCheckError,
  FileDownload,
  LoomError,
  pickAdapterFiles,
  untilAborted,
  withRetry,
  type AdapterFileInfo,
  type AdapterRef,
  type AdapterSource,
  type Logger,
  type ResolvedAdapter,
  type RetryPolicy,
  type SourceContext,
} from '@loom/core'
import { parseS3AdapterId, type S3Location } from './s3-adapter-id.ts'
import { classifyS3Error, describeS3Error, isTransientS3Error, listingError } from './s3-errors.ts'

/** Static credentials read from the environment at startup. Never logged. */
export interface S3Credentials {
  readonly accessKeyId: string
  readonly secretAccessKey: string
  readonly sessionToken?: string
}

export interface S3SourceOptions {
  /** The `adapter_source` code. */
  readonly name: string
  /** Custom endpoint for S3-compatible stores; undefined means AWS (or `AWS_ENDPOINT_URL_S3`). */
  readonly endpoint?: string
  readonly region: string
  readonly forcePathStyle: boolean
  /** Undefined when the environment has none: every request then fails with `missingCredentials`. */
  readonly credentials?: S3Credentials
  /** Why `credentials` is undefined, naming the variables; shown in request errors. */
  readonly missingCredentials?: string
  readonly retry: RetryPolicy
  /** Limit for listing one adapter (all pages, all retries), in milliseconds. */
  readonly listTimeoutMs: number
  /** Socket idle limit for any one S3 request, in milliseconds. */
  readonly requestTimeoutMs: number
  /** Most pages of 1000 keys read while listing one adapter folder. */
  readonly maxListPages: number
}

/** One object directly under an adapter's prefix, as the listing gave it. */
interface ListedObject {
  /** Name relative to the adapter prefix (`adapter_model.safetensors`). */
  readonly name: string
  readonly size: number
  readonly etag: string
}

/** A resolved S3 adapter remembers each file's ETag, so fetch() downloads exactly what resolve() saw. */
interface S3ResolvedAdapter extends ResolvedAdapter {
  readonly s3: S3Location & { readonly etags: Readonly<Record<string, string>> }
}

/**
 * Adapters in an S3 bucket (or any S3-compatible store), named `s3://<bucket>/<path>`.
 *
 * resolve(): one ListObjectsV2 of the folder (`Delimiter: '/'`, so sub-folders such as checkpoints
 * are not walked), picks the adapter files and pins the revision to a hash of their names, ETags
 * and sizes. Concurrent resolves of one id share one listing.
 *
 * fetch(): one GetObject per file, streamed to disk, in parallel, with `If-Match: <etag>` so a file
 * replaced after the listing is refused rather than mixed into the old revision. A transfer that
 * breaks part-way is retried with backoff and resumed with a `Range` request.
 */
export class S3AdapterSource implements AdapterSource {
  readonly name: string
  readonly #options: S3SourceOptions
  readonly #client: S3Client | undefined
  readonly #listing = new Map<string, Promise<S3ResolvedAdapter>>()

  constructor(options: S3SourceOptions) {
    this.name = options.name
    this.#options = options
    if (options.credentials === undefined) return
    this.#client = new S3Client({
      region: options.region,
      ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
      forcePathStyle: options.forcePathStyle,
      credentials: options.credentials,
      // One layer of retries, ours: it also covers a body that breaks after the headers arrived.
      maxAttempts: 1,
      // Only GET and LIST are sent; WHEN_REQUIRED keeps S3-compatible stores (s3rver, MinIO) happy.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      requestHandler: { connectionTimeout: 10_000, requestTimeout: options.requestTimeoutMs },
    })
  }

  async resolve(ref: AdapterRef, ctx: SourceContext): Promise<ResolvedAdapter> {
    const location = parseS3AdapterId(ref.id, this.name)
    const client = this.#requireClient(ref.id)
    if (ctx.signal.aborted) throw ctx.signal.reason
    // Keyed and resolved by the canonical id: `s3://b/p/` and `s3://b/p` are one adapter.
    const id = location.id
    let listing = this.#listing.get(id)
    if (listing === undefined) {
      // Shared by every caller, so it must not die with the first one: it has its own time limit.
      listing = this.#list(client, location, ctx).finally(() => this.#listing.delete(id))
      this.#listing.set(id, listing)
      // Every caller may have gone by the time it fails; the failure is theirs, not unhandled.
      listing.catch(() => undefined)
    }
    return await untilAborted(listing, ctx.signal)
  }

  async fetch(resolved: ResolvedAdapter, destDir: string, ctx: SourceContext): Promise<void> {
    const client = this.#requireClient(resolved.id)
    const location = (resolved as Partial<S3ResolvedAdapter>).s3 ?? {
      ...parseS3AdapterId(resolved.id, this.name),
      etags: {},
    }
    // One failed file stops the others at once; the cache throws the folder away.
    const stop = new AbortController()
    const signal = AbortSignal.any([ctx.signal, stop.signal])
    await Promise.all(
      resolved.files.map((file) =>
        this.#fetchFile(client, resolved.id, location, file, destDir, signal, ctx.logger).catch((err: unknown) => {
          stop.abort(err)
          throw err
        }),
      ),
    )
  }

  async close(): Promise<void> {
    this.#client?.destroy()
  }

  #requireClient(id: string): S3Client {
    if (this.#client !== undefined) return this.#client
    throw new LoomError('adapter_source_unavailable', {
      source: this.name,
      id,
      detail: this.#options.missingCredentials ?? 'no S3 credentials are configured',
    })
  }

  async #list(client: S3Client, location: S3Location, ctx: SourceContext): Promise<S3ResolvedAdapter> {
    const id = location.id
    const signal = AbortSignal.timeout(this.#options.listTimeoutMs)
    const where = `s3://${location.bucket}/${location.prefix}`
    const objects: ListedObject[] = []
    let sawAnything = false
    let token: string | undefined
    for (let page = 0; page < this.#options.maxListPages; page++) {
      const answer = await withRetry(
        () =>
          client.send(
            new ListObjectsV2Command({
              Bucket: location.bucket,
              Prefix: location.prefix,
              Delimiter: '/',
              ...(token === undefined ? {} : { ContinuationToken: token }),
            }),
            { abortSignal: signal },
          ),
        {
          ...this.#options.retry,
          signal,
          isRetryable: isTransientS3Error,
          onRetry: (err, attempt, waitMs) =>
            ctx.logger.warn(
              { source: this.name, adapter: id, attempt, waitMs, reason: describeS3Error(err) },
              'S3 listing failed; retrying',
            ),
        },
      ).catch((err: unknown) => {
        if (signal.aborted) {
          throw new LoomError('adapter_source_unavailable', {
            source: this.name,
            id,
            detail: `listing ${where} took longer than ${this.#options.listTimeoutMs} ms`,
          })
        }
        throw listingError(err, this.name, id, where)
      })
      for (const object of answer.Contents ?? []) {
        sawAnything = true
        if (object.Key === undefined || object.Size === undefined) continue
        objects.push({
          name: object.Key.slice(location.prefix.length),
          size: object.Size,
          etag: (object.ETag ?? '').replace(/^"|"$/g, ''),
        })
      }
      if ((answer.CommonPrefixes ?? []).length > 0) sawAnything = true
      if (answer.IsTruncated !== true || answer.NextContinuationToken === undefined) break
      token = answer.NextContinuationToken
    }
    if (!sawAnything) throw new LoomError('adapter_not_found', { id, source: this.name })
    const byName = new Map(objects.map((object) => [object.name, object]))
    const picked = pickAdapterFiles(byName.keys())
    if ('problem' in picked) {
      throw new LoomError('adapter_invalid', { id, detail: `${where}: ${picked.detail}` })
    }
    const revision = createHash('sha256')
    const etags: Record<string, string> = {}
    const files: AdapterFileInfo[] = []
    for (const file of picked.files.map((name) => byName.get(name) as ListedObject)) {
      revision.update(`${file.name}\0${file.etag}\0${file.size}\n`)
      if (file.etag !== '') etags[file.name] = file.etag
      files.push({ path: file.name, size: file.size })
    }
    ctx.logger.debug({ source: this.name, adapter: id, files: files.length }, 'S3 adapter resolved')
    return {
      source: this.name,
      id,
      revision: revision.digest('hex').slice(0, 32),
      files,
      s3: { ...location, etags },
    }
  }

  /** Download one object to `destDir/file.path`, resuming with `Range` after a broken transfer. */
  async #fetchFile(
    client: S3Client,
    id: string,
    location: S3Location & { readonly etags: Readonly<Record<string, string>> },
    file: AdapterFileInfo,
    destDir: string,
    signal: AbortSignal,
    logger: Logger,
  ): Promise<void> {
    const download = new FileDownload(path.join(destDir, ...file.path.split('/')), {
      ...(file.size === undefined ? {} : { size: file.size }),
      name: file.path,
    })
    const key = `${location.prefix}${file.path}`
    const etag = location.etags[file.path]
    const failed = (detail: string) => new LoomError('adapter_download_failed', { id, source: this.name, detail })
    await withRetry(
      async () => {
        // Resume only when the ETag pins the content; otherwise start the file over.
        const resume = download.bytes > 0 && etag !== undefined
        const answer = await client.send(
          new GetObjectCommand({
            Bucket: location.bucket,
            Key: key,
            ...(etag === undefined ? {} : { IfMatch: `"${etag}"` }),
            ...(resume ? { Range: `bytes=${download.bytes}-` } : {}),
          }),
          { abortSignal: signal },
        )
        const append = resume && (answer.ContentRange ?? '').startsWith(`bytes ${download.bytes}-`)
        await download.write((answer.Body as Readable | undefined) ?? null, { append, signal })
      },
      {
        ...this.#options.retry,
        signal,
        // A body longer than listed is not a broken transfer: resuming cannot mend it.
        isRetryable: (err) => !(err instanceof DownloadCheckError) && isTransientS3Error(err),
        onRetry: (err, attempt, waitMs) =>
          logger.warn(
            {
              source: this.name,
              adapter: id,
              file: file.path,
              bytes: download.bytes,
              attempt,
              waitMs,
              reason: describeS3Error(err),
            },
            'S3 download broke; retrying',
          ),
      },
    ).catch(async (err: unknown) => {
      await download.discard()
      if (signal.aborted) throw signal.reason
      if (err instanceof DownloadCheckError) throw failed(err.message)
      throw this.#downloadError(id, key, err)
    })
    try {
      download.verify()
    } catch (err) {
      await download.discard()
      throw failed((err as DownloadCheckError).message)
    }
  }

  #downloadError(id: string, key: string, err: unknown): LoomError {
    const kind = classifyS3Error(err)
    if (kind === 'changed') {
      return new LoomError(
        'adapter_download_failed',
        { id, source: this.name, detail: `${key} changed after it was listed; retry the request` },
        { cause: err },
      )
    }
    if (kind === 'credentials') return listingError(err, this.name, id, key)
    return new LoomError(
      'adapter_download_failed',
      { id, source: this.name, detail: `GetObject ${key}: ${describeS3Error(err)}` },
      { cause: err },
    )
  }
}
