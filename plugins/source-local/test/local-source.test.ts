import { mkdir, symlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import type { LoomError } from '@loom/core'
import { LocalAdapterSource } from '../src/local-source.ts'

async function adapterDir(root: string, name: string): Promise<string> {
  const dir = join(root, name)
  await mkdir(dir, { recursive: true })
  await writeFile(join(dir, 'adapter_config.json'), '{"r": 4}')
  await writeFile(join(dir, 'adapter_model.safetensors'), 'weights')
  return dir
}

t.test('resolves a directory inside the root, in place, with a content revision', async (t) => {
  const base = t.testdir({ roots: {} })
  const root = join(base, 'roots')
  const dir = await adapterDir(root, 'a')
  const source = new LocalAdapterSource('local', [root])
  const byName = await source.resolve({ source: 'local', id: 'a' })
  const byPath = await source.resolve({ source: 'local', id: dir })
  t.equal(byName.localDir, dir)
  t.equal(byName.revision, byPath.revision)
  t.same(
    byName.files.map((f) => f.path),
    ['adapter_config.json', 'adapter_model.safetensors'],
  )
  await writeFile(join(dir, 'adapter_model.safetensors'), 'new weights, longer')
  const edited = await source.resolve({ source: 'local', id: 'a' })
  t.not(edited.revision, byName.revision, 'editing the adapter changes its revision')
})

t.test('refuses ids that escape the roots through .. or a symlink', async (t) => {
  const base = t.testdir({ roots: {}, outside: {} })
  const root = join(base, 'roots')
  await adapterDir(join(base, 'outside'), 'secret')
  await symlink(join(base, 'outside', 'secret'), join(root, 'link'))
  const source = new LocalAdapterSource('local', [root])
  await t.rejects(source.resolve({ source: 'local', id: '../outside/secret' }), {
    code: 'adapter_id_invalid',
    message: /outside the allowed local roots/,
  })
  await t.rejects(source.resolve({ source: 'local', id: 'link' }), { code: 'adapter_id_invalid' })
  await t.rejects(source.resolve({ source: 'local', id: join(base, 'outside', 'secret') }), {
    code: 'adapter_id_invalid',
  })
})

t.test('a missing directory is adapter_not_found; an empty one is adapter_invalid', async (t) => {
  const base = t.testdir({ roots: { empty: {} } })
  const source = new LocalAdapterSource('local', [join(base, 'roots')])
  await t.rejects(source.resolve({ source: 'local', id: 'nope' }), {
    code: 'adapter_not_found',
    message: 'Adapter `nope` was not found in source `local`',
  })
  await t.rejects(source.resolve({ source: 'local', id: 'empty' }), { code: 'adapter_invalid' })
})

t.test('outside the roots, a missing and an existing directory get the same answer', async (t) => {
  const base = t.testdir({ roots: {}, outside: { exists: {} } })
  const source = new LocalAdapterSource('local', [join(base, 'roots')])
  const answers: [string, string][] = []
  for (const id of [join(base, 'outside', 'exists'), join(base, 'outside', 'missing'), '/', '/nonexistent-dir-xyz']) {
    const err = (await source.resolve({ source: 'local', id }).catch((e: unknown) => e)) as LoomError
    answers.push([err.code, err.message.replace(id, '<id>')])
  }
  t.same(
    answers,
    answers.map(() => ['adapter_id_invalid', answers[0]![1]]),
    'one code and message for every id outside the roots',
  )
})

t.test('aliases of one directory resolve to one canonical id', async (t) => {
  const base = t.testdir({ roots: { nested: {} }, second: {} })
  const root = join(base, 'roots')
  const dir = await adapterDir(root, 'a')
  await adapterDir(join(root, 'nested'), 'b')
  const other = await adapterDir(join(base, 'second'), 'c')
  await symlink(dir, join(root, 'alias'))
  const source = new LocalAdapterSource('local', [root, join(base, 'second')])
  for (const id of ['a', './a', 'a/', './/a', 'nested/../a', dir, `${dir}/`, 'alias']) {
    const resolved = await source.resolve({ source: 'local', id })
    t.equal(resolved.id, 'a', `${JSON.stringify(id)} is "a"`)
  }
  t.equal((await source.resolve({ source: 'local', id: './nested/b' })).id, 'nested/b')
  t.equal((await source.resolve({ source: 'local', id: other })).id, other, 'outside the first root: the real path')
  t.equal((await source.resolve({ source: 'local', id: `${other}/.` })).id, other)
})
