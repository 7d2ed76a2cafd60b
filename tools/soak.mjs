// Soak test: a mix of short requests against a Loom server, with the server's memory sampled as it
// goes, to tell a leak (RSS that keeps climbing) from warm-up (RSS that settles).
//
//   node tools/soak.mjs [--requests 25000] [--concurrency 8] [--every 1000] [--warmup 5000]
//                       [--port 3123] [--config config/default.yaml] [--url URL --pid PID]
//
// Without --url it starts `serve --config <config>` as a child process on --port (with a tiny
// preload that reports V8's heap figures every second on stderr), waits for /health, runs the
// requests and stops it. With --url it targets a running server and reads RSS from /proc/<--pid>.
// The mix is what issue 13's black-box load sent: /generate, /generate_stream, /v1/completions and
// /v1/chat/completions, streamed and not, n > 1, some aborted mid-stream, some with the `kjv` and
// `devil` adapters, some invalid. Every --every requests it prints a row (requests, RSS, V8 heap
// used, external and array-buffer memory); at the end the verdict: RSS growth per 1,000 requests
// after --warmup, by least squares over the rows past it. Extra node flags for the child go in
// SOAK_NODE_OPTIONS (e.g. `--heapsnapshot-signal=SIGUSR2`), extra env as usual (MALLOC_ARENA_MAX).
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'

const { values: opts } = parseArgs({
  options: {
    requests: { type: 'string', default: '25000' },
    concurrency: { type: 'string', default: '8' },
    every: { type: 'string', default: '1000' },
    warmup: { type: 'string', default: '5000' },
    port: { type: 'string', default: '3123' },
    config: { type: 'string', default: 'config/default.yaml' },
    url: { type: 'string' },
    pid: { type: 'string' },
  },
})
const total = Number(opts.requests)
const concurrency = Number(opts.concurrency)
const every = Number(opts.every)
const warmup = Number(opts.warmup)

/** Reports V8's heap figures on stderr every second, from inside the server (no inspector needed). */
const HEAP_PROBE =
  'data:text/javascript,import v8 from "node:v8";setInterval(()=>{const h=v8.getHeapStatistics(),m=process.memoryUsage();' +
  'process.stderr.write("SOAK-HEAP "+JSON.stringify({heapUsed:h.used_heap_size,heapTotal:h.total_heap_size,external:m.external,arrayBuffers:m.arrayBuffers})+"\\n")},1000).unref()'

let child = null
let lastHeap = null
let base = opts.url
let pid = opts.pid === undefined ? null : Number(opts.pid)
if (base === undefined) {
  base = `http://127.0.0.1:${opts.port}`
  const flags = (process.env.SOAK_NODE_OPTIONS ?? '').split(' ').filter(Boolean)
  child = spawn(
    process.execPath,
    [...flags, '--import', 'tsx', '--import', HEAP_PROBE, 'core/src/cli/main.ts', 'serve', '--config', opts.config],
    { env: { ...process.env, PORT: opts.port }, stdio: ['ignore', 'ignore', 'pipe'] },
  )
  pid = child.pid
  let buffered = ''
  child.stderr.on('data', (chunk) => {
    buffered += chunk
    const lines = buffered.split('\n')
    buffered = lines.pop()
    for (const line of lines) {
      if (line.startsWith('SOAK-HEAP ')) lastHeap = JSON.parse(line.slice(10))
      else if (line.trim() !== '') process.stderr.write(`server: ${line}\n`)
    }
  })
  child.on('exit', (code, signal) => {
    if (!stopping) {
      console.error(`the server exited (${code ?? signal}) during the soak`)
      process.exit(1)
    }
  })
}
let stopping = false

/** The server's resident set in MB, from /proc (Linux). */
function rssMb() {
  if (pid === null) return NaN
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1]) / 1024
}

async function waitReady() {
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`${base}/health`)
      .then((r) => r.ok)
      .catch(() => false)
    if (ok) return
    await sleep(500)
  }
  throw new Error(`${base}/health did not answer 200 within 5 minutes`)
}

const WORDS = ['ROMEO', 'love', 'king', 'night', 'sword', 'crown', 'heaven', 'fool', 'truth', 'grave', 'honour']
const pick = (i, list) => list[i % list.length]
/** A prompt that differs between requests, so nothing is answered from a cache of identical prompts. */
const prompt = (i) => `${pick(i, WORDS)} ${pick(i * 7 + 3, WORDS)} ${i}:\n`
const adapterFor = (i) => pick(i, ['', '', 'kjv', 'devil'])

/** One request of the mix, chosen by its index: [path, body, streamed, abort after the first chunk]. */
function requestFor(i) {
  const kind = i % 12
  const adapter = adapterFor(i >> 2)
  const seed = i % 3 === 0 ? { seed: i } : {}
  switch (kind) {
    case 0:
      return ['/generate', { inputs: prompt(i), parameters: { max_new_tokens: 4, adapter_id: adapter, details: true } }]
    case 1:
      return [
        '/generate_stream',
        { inputs: prompt(i), parameters: { max_new_tokens: 6, adapter_id: adapter, do_sample: true, ...seed } },
        true,
      ]
    case 2: // aborted mid-stream
      return [
        '/generate_stream',
        { inputs: prompt(i), parameters: { max_new_tokens: 32, adapter_id: adapter } },
        true,
        true,
      ]
    case 3:
      return [
        '/v1/chat/completions',
        {
          model: adapter,
          messages: [{ role: 'user', content: prompt(i) }],
          max_tokens: 4,
          n: 2,
          temperature: 0.8,
          ...seed,
        },
      ]
    case 4:
      return [
        '/v1/chat/completions',
        {
          model: adapter,
          messages: [{ role: 'user', content: prompt(i) }],
          max_tokens: 5,
          stream: true,
          stream_options: { include_usage: true },
        },
        true,
      ]
    case 5: // aborted mid-stream, n > 1
      return [
        '/v1/chat/completions',
        { model: adapter, messages: [{ role: 'user', content: prompt(i) }], max_tokens: 32, n: 2, stream: true },
        true,
        true,
      ]
    case 6:
      return ['/v1/completions', { model: adapter, prompt: prompt(i), max_tokens: 4, n: 2, logprobs: 2, ...seed }]
    case 7:
      return [
        '/v1/completions',
        { model: adapter, prompt: prompt(i), max_tokens: 5, stream: true, stop: ['\n\n'] },
        true,
      ]
    case 8:
      return ['/v1/completions', { model: adapter, prompt: [prompt(i), prompt(i + 1)], max_tokens: 3 }]
    case 9: // invalid: a value out of range
      return ['/generate', { inputs: prompt(i), parameters: { max_new_tokens: -1 } }]
    case 10: // invalid: an adapter that is not there, and an unknown field
      return i % 24 < 12
        ? [
            '/v1/chat/completions',
            { model: `missing-${i}`, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 },
          ]
        : ['/v1/completions', { model: '', prompt: 'hi', max_tokens: 2, frobnicate: i }]
    default: // invalid JSON
      return ['/generate', '{"inputs": "unterminated']
  }
}

const counts = new Map()
async function send(i) {
  const [path, body, streamed = false, abort = false] = requestFor(i)
  const controller = new AbortController()
  let outcome
  try {
    const res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      signal: controller.signal,
    })
    outcome = String(res.status)
    if (streamed && res.ok && abort) {
      const reader = res.body.getReader()
      await reader.read()
      controller.abort()
      outcome = 'aborted'
    } else {
      await res.arrayBuffer()
    }
  } catch (err) {
    outcome = controller.signal.aborted ? 'aborted' : `error: ${err.cause?.code ?? err.message}`
  }
  counts.set(outcome, (counts.get(outcome) ?? 0) + 1)
}

const rows = []
function sample(done) {
  const row = { done, rss: rssMb(), ...(lastHeap ?? {}) }
  rows.push(row)
  const mb = (x) => (x === undefined ? '     -' : (x / 2 ** 20).toFixed(1).padStart(6))
  console.log(
    `${String(done).padStart(8)}  ${row.rss.toFixed(1).padStart(7)}  ${mb(row.heapUsed)}  ${mb(row.heapTotal)}  ${mb(row.external)}  ${mb(row.arrayBuffers)}`,
  )
}

/** Least-squares slope of `key` against requests done, in MB per 1,000 requests, over `points`. */
function slope(points, key) {
  const xs = points.map((p) => p.done / 1000)
  const ys = points.map((p) => (key === 'rss' ? p.rss : p[key] / 2 ** 20))
  const mx = xs.reduce((a, b) => a + b, 0) / xs.length
  const my = ys.reduce((a, b) => a + b, 0) / ys.length
  let num = 0
  let den = 0
  for (let k = 0; k < xs.length; k++) {
    num += (xs[k] - mx) * (ys[k] - my)
    den += (xs[k] - mx) ** 2
  }
  return den === 0 ? NaN : num / den
}

try {
  await waitReady()
  await sleep(1500) // a heap report from the idle server
  console.log(`soak: ${total} requests, concurrency ${concurrency}, against ${base} (pid ${pid})`)
  console.log(`requests  RSS(MB)  heapMB  heapTot  extMB  abufMB`)
  sample(0)
  const started = performance.now()
  let next = 0
  let done = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        await send(next++)
        if (++done % every === 0) sample(done)
      }
    }),
  )
  const seconds = (performance.now() - started) / 1000
  await sleep(1500)
  console.log(`${total} requests in ${seconds.toFixed(0)} s (${(total / seconds).toFixed(0)}/s); outcomes:`)
  console.log(
    [...counts]
      .sort()
      .map(([k, v]) => `  ${k}: ${v}`)
      .join('\n'),
  )
  const after = rows.filter((r) => r.done >= warmup)
  if (after.length >= 3) {
    const first = after[0]
    const last = after.at(-1)
    const heap = last.heapUsed === undefined ? '' : `; V8 heap used ${slope(after, 'heapUsed').toFixed(3)} MB`
    console.log(
      `verdict: RSS ${rows[0].rss.toFixed(0)} MB idle, ${first.rss.toFixed(0)} MB at ${first.done} requests, ` +
        `${last.rss.toFixed(0)} MB at ${last.done}; after warm-up RSS grows ` +
        `${(slope(after, 'rss') * 1024).toFixed(0)} KB per 1,000 requests (least squares)${heap} per 1,000`,
    )
  } else {
    console.log(`verdict: too few samples after the ${warmup}-request warm-up to fit a slope`)
  }
} finally {
  stopping = true
  if (child !== null) {
    child.kill('SIGTERM')
    await new Promise((resolve) => child.once('exit', resolve))
  }
}
