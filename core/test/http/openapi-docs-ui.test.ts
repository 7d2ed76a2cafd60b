import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { startSdkServer } from '../openai/sdk-test-server.ts'
import type { OpenApiDocument } from './openapi-checks.ts'

/**
 * Issue 18, point 4: `/docs` serves Swagger UI from @fastify/swagger-ui's own assets (no network),
 * and, opened in headless Chromium (Debian's `chromium` package), renders every documented route.
 * Swagger UI renders in the browser, so the page is loaded with a virtual-time budget that lets its
 * scripts fetch the document and draw, then its DOM is read.
 */

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((path) => existsSync(path))

/** The flags this machine's Chromium needs to run headless, offline and without a profile. */
const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]

/** Load `url` in Chromium and return the DOM once the page's scripts have run. */
async function renderedDom(chromium: string, url: string, profileDir: string): Promise<string> {
  const args = [...CHROMIUM_FLAGS, `--user-data-dir=${profileDir}`, '--virtual-time-budget=10000', '--dump-dom', url]
  // Its own process group, so its helper processes go with it however it ends.
  const child = spawn(chromium, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  const out: Buffer[] = []
  const err: Buffer[] = []
  child.stdout.on('data', (chunk: Buffer) => out.push(chunk))
  child.stderr.on('data', (chunk: Buffer) => err.push(chunk))
  const killGroup = () => {
    try {
      process.kill(-child.pid!, 'SIGKILL')
    } catch {
      // Already gone.
    }
  }
  const timer = setTimeout(killGroup, 90_000)
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on('error', reject)
      child.on('close', resolve)
    })
    if (code !== 0) throw new Error(`chromium exited with ${code}: ${Buffer.concat(err).toString().slice(-2000)}`)
    return Buffer.concat(out).toString('utf8')
  } finally {
    clearTimeout(timer)
    killGroup()
  }
}

t.test('/docs', async (t) => {
  const { test, baseUrl } = await startSdkServer(t.testdir())
  t.teardown(() => test.close())
  const doc = (await (await fetch(`${baseUrl}/openapi.json`)).json()) as OpenApiDocument

  t.test('serves Swagger UI and its assets from the package', async (t) => {
    const page = await fetch(`${baseUrl}/docs`)
    t.equal(page.status, 200)
    t.match(page.headers.get('content-type'), /^text\/html/)
    const html = await page.text()
    // Asset URLs are relative to the page (`./docs/static/…` for `/docs`).
    const assets = [...html.matchAll(/(?:src|href)="([^"]*\/static\/[^"]+)"/g)].map(
      (m) => new URL(m[1]!, `${baseUrl}/docs`).href,
    )
    t.ok(
      assets.some((a) => a.endsWith('/docs/static/swagger-ui-bundle.js')),
      `the page loads the bundle: ${assets.join(', ')}`,
    )
    for (const asset of assets) t.equal((await fetch(asset)).status, 200, asset)
    t.notMatch(html, /https?:\/\/(?!127\.0\.0\.1)/, 'nothing is loaded from another host')
    t.same(await (await fetch(`${baseUrl}/docs/json`)).json(), doc, 'the UI reads the same document')
  })

  t.test(
    'renders every route in headless Chromium',
    { skip: CHROMIUM === undefined && 'Chromium is not installed (Debian: apt-get install chromium)' },
    async (t) => {
      const dom = await renderedDom(CHROMIUM!, `${baseUrl}/docs`, await mkdtemp(join(t.testdir(), 'chromium-')))
      t.notMatch(dom, /Failed to load API definition/, 'Swagger UI loaded the document')
      const rendered = [...dom.matchAll(/<div class="opblock opblock-(\w+)[^]*?data-path="([^"]+)"/g)]
        .map((m) => `${m[1]!.toUpperCase()} ${m[2]!.replace(/&amp;/g, '&')}`)
        .sort()
      const documented = Object.entries(doc.paths)
        .flatMap(([path, item]) => Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`))
        .sort()
      t.same(rendered, documented, 'one operation block per documented route')
      t.match(dom, /Loom/, 'the title')
    },
  )
})
