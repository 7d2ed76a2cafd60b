import { createHash, randomBytes } from 'node:crypto'
import { readFile, stat } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { Readable } from 'node:stream'
import t from 'tap'
import { DownloadCheckError, DownloadStalledError, FileDownload, downloadFile } from '@loom/core'

const BODY = randomBytes(200_000)
const SHA = createHash('sha256').update(BODY).digest('hex')

/** `data` as a Node stream in `size`-byte chunks. */
function chunks(data: Buffer, size = 16_384): Readable {
  const parts: Buffer[] = []
  for (let i = 0; i < data.length; i += size) parts.push(data.subarray(i, i + size))
  return Readable.from(parts)
}

/** A stream that sends `data`, then fails with `err` (a cut connection). */
function breaking(data: Buffer, err: Error): Readable {
  return Readable.from(
    (async function* () {
      yield data
      throw err
    })(),
  )
}

const exists = async (file: string) => (await stat(file).catch(() => null)) !== null

t.test('downloadFile saves a Response, a web stream or a Node stream, creating folders and checking', async (t) => {
  const dir = t.testdir({})
  const fromResponse = path.join(dir, 'a', 'b', 'adapter_model.safetensors')
  t.same(await downloadFile(new Response(BODY), fromResponse, { size: BODY.length, sha256: SHA.toUpperCase() }), {
    bytes: BODY.length,
    sha256: SHA,
  })
  t.ok((await readFile(fromResponse)).equals(BODY))

  const fromWeb = path.join(dir, 'web.bin')
  t.same(await downloadFile(new Response(BODY).body, fromWeb, { size: BODY.length }), { bytes: BODY.length })
  t.ok((await readFile(fromWeb)).equals(BODY))

  const fromNode = path.join(dir, 'node.bin')
  const progress: number[] = []
  await downloadFile(chunks(BODY), fromNode, { sha256: SHA, onProgress: (bytes) => void progress.push(bytes) })
  t.ok((await readFile(fromNode)).equals(BODY))
  t.equal(progress.at(-1), BODY.length)
  t.ok(progress.length > 1, 'progress after each chunk')

  const empty = path.join(dir, 'empty.json')
  t.same(await downloadFile(new Response(null), empty, { size: 0 }), { bytes: 0 })
  t.equal((await readFile(empty)).length, 0, 'no body: an empty file')
})

t.test('a wrong size or SHA-256 fails and leaves no partial file', async (t) => {
  const dir = t.testdir({})
  const short = path.join(dir, 'short.bin')
  await t.rejects(downloadFile(chunks(BODY), short, { size: BODY.length + 1, name: 'weights/short.bin' }), {
    name: 'DownloadCheckError',
    check: 'size',
    expected: BODY.length + 1,
    actual: BODY.length,
    message: `weights/short.bin has ${BODY.length} bytes, expected ${BODY.length + 1}`,
  })
  t.notOk(await exists(short), 'partial file removed')

  const damaged = path.join(dir, 'damaged.bin')
  const err = await downloadFile(chunks(BODY), damaged, { sha256: '0'.repeat(64) }).catch((e: unknown) => e)
  t.ok(err instanceof DownloadCheckError)
  t.match(err, { check: 'sha256', expected: '0'.repeat(64), actual: SHA })
  t.equal((err as Error).message, `damaged.bin has SHA-256 ${SHA}, expected ${'0'.repeat(64)}`)
  t.notOk(await exists(damaged))
})

t.test('a body that outgrows its size is cut at once, not written to the end', async (t) => {
  const dir = t.testdir({})
  let produced = 0
  const endless = Readable.from(
    (async function* () {
      for (;;) {
        produced += 1024
        yield Buffer.alloc(1024, 1)
      }
    })(),
  )
  await t.rejects(downloadFile(endless, path.join(dir, 'big.bin'), { size: 10_000 }), {
    name: 'DownloadCheckError',
    check: 'size',
    expected: 10_000,
    actual: 10_240,
  })
  t.ok(produced < 100_000, `stopped reading after ${produced} bytes`)
  t.notOk(await exists(path.join(dir, 'big.bin')))
})

t.test('an abort throws its reason and removes the file', async (t) => {
  const dir = t.testdir({})
  const controller = new AbortController()
  const reason = new Error('request cancelled')
  const slow = Readable.from(
    (async function* () {
      yield Buffer.alloc(1000)
      controller.abort(reason)
      await new Promise((resolve) => setTimeout(resolve, 50))
      yield Buffer.alloc(1000)
    })(),
  )
  await t.rejects(downloadFile(slow, path.join(dir, 'x.bin'), { signal: controller.signal }), reason)
  t.notOk(await exists(path.join(dir, 'x.bin')))

  const body = new Response(BODY)
  await t.rejects(downloadFile(body, path.join(dir, 'y.bin'), { signal: AbortSignal.abort(reason) }), reason)
  t.notOk(await exists(path.join(dir, 'y.bin')), 'nothing written for a request already cancelled')
})

t.test('a stalled body fails with DownloadStalledError (a TimeoutError)', async (t) => {
  const dir = t.testdir({})
  let release: () => void = () => undefined
  const stalls = Readable.from(
    (async function* () {
      yield Buffer.alloc(500)
      await new Promise<void>((resolve) => (release = resolve))
    })(),
  )
  const err = await downloadFile(stalls, path.join(dir, 's.bin'), { idleMs: 30, name: 's.bin' }).catch(
    (e: unknown) => e,
  )
  release()
  t.ok(err instanceof DownloadStalledError)
  t.match(err, { name: 'TimeoutError', idleMs: 30, bytes: 500, message: 's.bin: no data for 30 ms after 500 bytes' })
})

t.test('FileDownload keeps what arrived before a break and resumes with append', async (t) => {
  const dir = t.testdir({})
  const download = new FileDownload(path.join(dir, 'sub', 'w.bin'), { size: BODY.length, sha256: SHA })
  const cut = new Error('terminated')
  await t.rejects(download.write(breaking(BODY.subarray(0, 70_000), cut)), cut, "the stream's own error")
  t.equal(download.bytes, 70_000, 'exactly what is on disk')
  t.throws(() => download.verify(), { name: 'DownloadCheckError', check: 'size', actual: 70_000 })
  await download.write(chunks(BODY.subarray(70_000)), { append: true })
  t.same(download.verify(), { bytes: BODY.length, sha256: SHA }, 'the hash followed the append')
  t.same(download.verify(), { bytes: BODY.length, sha256: SHA }, 'verify can be asked twice')
  t.ok((await readFile(download.path)).equals(BODY))

  // A server that ignored the Range sends everything again: without append the file starts over.
  await download.write(breaking(BODY.subarray(0, 10), cut)).catch(() => undefined)
  await download.write(chunks(BODY))
  t.same(download.verify(), { bytes: BODY.length, sha256: SHA })
  t.ok((await readFile(download.path)).equals(BODY))

  await download.discard()
  t.equal(download.bytes, 0)
  t.notOk(await exists(download.path))
  await download.discard()
})

t.test('over real HTTP: a cut transfer resumes with Range and the socket is released', async (t) => {
  const requests: (string | undefined)[] = []
  const server = createServer((req, res) => {
    requests.push(req.headers.range)
    const start = Number(/^bytes=(\d+)-$/.exec(req.headers.range ?? '')?.[1] ?? 0)
    if (requests.length === 1) {
      // The first answer promises the whole file, sends half and drops the connection.
      res.writeHead(200, { 'content-length': BODY.length })
      res.write(BODY.subarray(0, 100_000), () => res.destroy())
      return
    }
    res.writeHead(start > 0 ? 206 : 200, {
      'content-length': BODY.length - start,
      ...(start > 0 ? { 'content-range': `bytes ${start}-${BODY.length - 1}/${BODY.length}` } : {}),
    })
    res.end(BODY.subarray(start))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/w.bin`
  const download = new FileDownload(path.join(t.testdir({}), 'w.bin'), { size: BODY.length, sha256: SHA })
  const signal = new AbortController().signal
  await t.rejects(download.write(await fetch(url, { signal }), { signal }), { name: 'TypeError' })
  t.ok(download.bytes > 0 && download.bytes <= 100_000, `kept ${download.bytes} bytes`)
  const res = await fetch(url, { headers: { range: `bytes=${download.bytes}-` }, signal })
  t.equal(res.status, 206)
  await download.write(res, { append: true, signal })
  t.same(download.verify(), { bytes: BODY.length, sha256: SHA })
  t.equal(requests[0], undefined, 'the first request asks for the whole file')
  t.equal(requests[1], `bytes=${res.headers.get('content-range')?.split(/[ -]/)[1]}-`, 'the second asks for the rest')
})
