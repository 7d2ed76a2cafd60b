import { mkdir, readFile, readdir, utimes, writeFile } from 'node:fs/promises'
import { join, relative, sep } from 'node:path'
import t from 'tap'
import pino from 'pino'
import { AdapterCache, cacheSegment } from '../../src/adapters/adapter-cache.ts'
import type { AdapterSource } from '../../src/contracts/adapter-source.ts'
import type { ResolvedAdapter } from '../../src/contracts/adapter.ts'

/**
 * The disk cache keeps every (source, id, revision) in its own directory: ids that differ only in
 * characters the directory name encodes must never share one (one tenant's adapter would be
 * served as another's), and a directory whose identity file names another adapter is not served.
 */
const logger = pino({ level: 'silent' })

/** A source that writes one file whose content names the adapter, and counts its fetches. */
function namingSource(): AdapterSource & { fetches: string[] } {
  const fetches: string[] = []
  return {
    name: 'pbase',
    fetches,
    resolve: async () => {
      throw new Error('not used')
    },
    async fetch(resolved: ResolvedAdapter, destDir: string) {
      fetches.push(resolved.id)
      await writeFile(join(destDir, 'adapter_config.json'), JSON.stringify({ id: resolved.id }))
    },
  }
}

const resolved = (id: string, revision = '1-f95ac3ae3ab1'): ResolvedAdapter => ({
  source: 'pbase',
  id,
  revision,
  files: [{ path: 'adapter_config.json' }],
})

t.test('ids that used to collide get their own directories and their own weights', async (t) => {
  const root = t.testdir()
  const cache = new AdapterCache({ root, attempts: 1, logger })
  const source = namingSource()
  const ids = ['poet/1', 'poet_2F1', 'poet%2F1', 'a.b', 'a_2Eb', '..', '.', 'x'.repeat(1024), `${'x'.repeat(1023)}y`]
  const dirs = new Set<string>()
  for (const id of ids) {
    const dir = await cache.ensure(resolved(id), source, { signal: AbortSignal.timeout(10_000), logger })
    dirs.add(dir)
    const rel = relative(root, dir)
    t.notOk(rel.startsWith('..') || rel.split(sep).includes('..'), `${id.slice(0, 20)}: stays under the root`)
    t.ok(
      rel.split(sep).every((part) => part.length <= 160),
      `${id.slice(0, 20)}: short directory names`,
    )
    t.same(
      JSON.parse(await readFile(join(dir, 'adapter_config.json'), 'utf8')),
      { id },
      `${id.slice(0, 20)}: its own files`,
    )
  }
  t.equal(dirs.size, ids.length, 'one directory per id')
  t.same(source.fetches, ids, 'each fetched once')
})

t.test('cacheSegment is injective on the characters it rewrites', async (t) => {
  const inputs = ['_', '%5F', '_5F', '.', '%2E', '_2E', '%', '_25', '/', '_2F', 'a+b', '~']
  const out = inputs.map(cacheSegment)
  t.equal(new Set(out).size, inputs.length, out.join(' '))
  t.ok(
    out.every((s) => /^[A-Za-z0-9_!~*'()-]+$/.test(s)),
    'only portable file-name characters',
  )
})

t.test('a complete directory whose identity names another adapter is downloaded again', async (t) => {
  const root = t.testdir()
  const cache = new AdapterCache({ root, attempts: 1, logger })
  const source = namingSource()
  const wanted = resolved('victim/1')
  const dir = cache.pathFor(wanted)
  await mkdir(dir, { recursive: true })
  await writeFile(join(dir, 'adapter_config.json'), JSON.stringify({ id: 'attacker' }))
  await writeFile(
    join(dir, '.loom-adapter.json'),
    JSON.stringify({ source: 'pbase', id: 'attacker/1', revision: wanted.revision }),
  )
  await writeFile(join(dir, '.loom-complete'), 'x')
  const got = await cache.ensure(wanted, source, { signal: AbortSignal.timeout(10_000), logger })
  t.equal(got, dir)
  t.same(source.fetches, ['victim/1'], 'fetched rather than served from the mismatched directory')
  t.same(JSON.parse(await readFile(join(dir, 'adapter_config.json'), 'utf8')), { id: 'victim/1' })
  t.ok((await readdir(dir)).includes('.loom-complete'))
})

t.test('a cached entry whose files no longer match their source is fetched again', async (t) => {
  const root = t.testdir()
  const source = namingSource()
  const wanted: ResolvedAdapter = { ...resolved('acme/p5'), files: [{ path: 'adapter_config.json', size: 16 }] }
  const first = new AdapterCache({ root, attempts: 1, logger })
  const dir = await first.ensure(wanted, source, { signal: AbortSignal.timeout(10_000), logger })
  t.equal((await readFile(join(dir, 'adapter_config.json'), 'utf8')).length, 16)
  // Damaged while the server was down (a truncated file).
  await writeFile(join(dir, 'adapter_config.json'), '{"id":')
  const restarted = new AdapterCache({ root, attempts: 1, logger })
  await restarted.ensure(wanted, source, { signal: AbortSignal.timeout(10_000), logger })
  t.same(source.fetches, ['acme/p5', 'acme/p5'], 'downloaded again')
  t.same(JSON.parse(await readFile(join(dir, 'adapter_config.json'), 'utf8')), { id: 'acme/p5' })
})

t.test('temporary directories a killed process left long ago are removed; fresh ones are kept', async (t) => {
  const root = t.testdir()
  const stale = join(root, '.tmp', 'acme_2Fp-0123456789ab')
  const fresh = join(root, '.tmp', 'acme_2Fq-ba9876543210')
  await mkdir(stale, { recursive: true })
  await mkdir(fresh, { recursive: true })
  const old = new Date(Date.now() - 7 * 60 * 60 * 1000)
  await utimes(stale, old, old)
  const cache = new AdapterCache({ root, attempts: 1, logger })
  await cache.ensure(resolved('acme/x'), namingSource(), { signal: AbortSignal.timeout(10_000), logger })
  for (let i = 0; i < 50 && (await readdir(join(root, '.tmp'))).includes('acme_2Fp-0123456789ab'); i++) {
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  const left = await readdir(join(root, '.tmp'))
  t.notOk(left.includes('acme_2Fp-0123456789ab'), 'the stale one is gone')
  t.ok(left.includes('acme_2Fq-ba9876543210'), 'the fresh one stays (another process may be using it)')
})
