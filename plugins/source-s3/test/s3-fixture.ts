import { readdir, readFile } from 'node:fs/promises'
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3'
import S3rver from 's3rver'

/** s3rver's built-in key pair; it checks the key id only, never the signature. */
export const S3_KEY_ID = 'S3RVER'
export const S3_SECRET = 'S3RVER'

/** One request the proxy passed on (or answered itself). */
export interface SeenRequest {
  readonly method: string
  /** Path-style: `/<bucket>/<key>`, decoded. */
  readonly path: string
  readonly query: string
  readonly range?: string
}

/**
 * A real S3 server (s3rver, files in `directory`) behind a loopback proxy that records every
 * request and can inject failures: the proxy's URL is the endpoint under test, while uploads go
 * straight to s3rver so they are not counted.
 */
export class S3Fixture {
  readonly seen: SeenRequest[] = []
  /** The endpoint to give the source (the proxy). */
  readonly url: string
  /** An SDK client that talks to s3rver directly, for uploads. */
  readonly admin: S3Client
  #failNext = 0
  #failStatus = 503
  #break: { key: string; afterBytes: number } | undefined
  readonly #s3rver: S3rver
  readonly #proxy: Server
  readonly #backendPort: number

  private constructor(s3rver: S3rver, backendPort: number, proxy: Server) {
    this.#s3rver = s3rver
    this.#backendPort = backendPort
    this.#proxy = proxy
    this.url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`
    this.admin = new S3Client({
      endpoint: `http://127.0.0.1:${backendPort}`,
      forcePathStyle: true,
      region: 'us-east-1',
      credentials: { accessKeyId: S3_KEY_ID, secretAccessKey: S3_SECRET },
      // integration.md §3: the default WHEN_SUPPORTED stores aws-chunked framing in s3rver's files.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    })
  }

  static async start(directory: string, buckets: string[]): Promise<S3Fixture> {
    const s3rver = new S3rver({
      address: '127.0.0.1',
      port: 0,
      silent: true,
      directory,
      configureBuckets: buckets.map((name) => ({ name })),
    })
    const { port } = await s3rver.run()
    const proxy = createServer()
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
    const fixture = new S3Fixture(s3rver, port, proxy)
    proxy.on('request', (req: IncomingMessage, res: ServerResponse) => fixture.handle(req, res))
    return fixture
  }

  /** Answer the next `n` requests with `status` (an S3 XML error), without passing them on. */
  failNext(n: number, status = 503): void {
    this.#failNext = n
    this.#failStatus = status
  }

  /** Cut the connection of the next GET of `key` (`bucket/key`) after `afterBytes` body bytes. */
  breakNextGet(key: string, afterBytes: number): void {
    this.#break = { key, afterBytes }
  }

  /** GetObject requests seen for `/<bucket>/<key>`. */
  gets(bucketKey: string): number {
    return this.seen.filter((r) => r.method === 'GET' && !r.query.includes('list-type') && r.path === `/${bucketKey}`)
      .length
  }

  /** ListObjectsV2 requests seen. */
  lists(): number {
    return this.seen.filter((r) => r.method === 'GET' && /(^|&)list-type=2/.test(r.query)).length
  }

  /** Upload every file of `dir` under `s3://bucket/prefix/`. */
  async uploadDir(dir: string, bucket: string, prefix: string): Promise<void> {
    for (const name of await readdir(dir)) {
      await this.admin.send(
        new PutObjectCommand({ Bucket: bucket, Key: `${prefix}/${name}`, Body: await readFile(path.join(dir, name)) }),
      )
    }
  }

  async put(bucket: string, key: string, body: Buffer | string): Promise<void> {
    await this.admin.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }))
  }

  async close(): Promise<void> {
    this.admin.destroy()
    this.#proxy.closeAllConnections()
    await new Promise<void>((resolve) => this.#proxy.close(() => resolve()))
    await this.#s3rver.close()
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x')
    const seen: SeenRequest = {
      method: req.method ?? '',
      path: decodeURIComponent(url.pathname),
      query: url.search.replace(/^\?/, ''),
      ...(req.headers.range === undefined ? {} : { range: req.headers.range }),
    }
    this.seen.push(seen)
    if (this.#failNext > 0) {
      this.#failNext--
      req.resume()
      res.writeHead(this.#failStatus, { 'content-type': 'application/xml' })
      res.end(
        `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${this.#failStatus === 403 ? 'AccessDenied' : 'ServiceUnavailable'}</Code><Message>injected by the test</Message></Error>`,
      )
      return
    }
    const cut = this.#break !== undefined && seen.method === 'GET' && seen.path === `/${this.#break.key}`
    const afterBytes = cut ? this.#break!.afterBytes : 0
    if (cut) this.#break = undefined
    const upstream = request(
      { host: '127.0.0.1', port: this.#backendPort, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        if (!cut) {
          answer.pipe(res)
          return
        }
        let sent = 0
        answer.on('data', (chunk: Buffer) => {
          if (sent >= afterBytes) return
          const part = chunk.subarray(0, afterBytes - sent)
          sent += part.length
          res.write(part)
          if (sent >= afterBytes) {
            answer.destroy()
            // Flush what was written, then drop the socket mid-body.
            res.socket?.end(() => res.socket?.destroy())
          }
        })
      },
    )
    upstream.on('error', () => res.destroy())
    req.pipe(upstream)
  }
}
