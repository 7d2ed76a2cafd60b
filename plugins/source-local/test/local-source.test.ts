import { mkdir, symlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
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
