// The AVX2 kernels (for CPUs without AVX-512). The normal build uses every vector unit of the
// build machine, so on an AVX-512 machine this builds the other variant in a temp folder
// (LOOM_NATIVE_ISA=avx2, ~10 s) and runs the kernel self-test on it, so both paths stay checked.
import { spawnSync } from 'node:child_process'
import { cp, mkdtemp, rm, symlink } from 'node:fs/promises'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import type { NativeAddon } from '../src/load-native.ts'
import { loadNative } from '../src/index.ts'

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

t.test('the AVX2 build passes the kernel self-test', async (t) => {
  if (loadNative().isa === 'avx2') {
    t.pass('the main build is the AVX2 one; kernels.test.ts checks it')
    return
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-avx2-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  for (const part of ['binding.gyp', 'package.json', 'scripts', 'native'])
    await cp(path.join(pluginDir, part), path.join(dir, part), { recursive: true })
  // node-addon-api and node-gyp resolve from the copy's node_modules, as from the plugin's.
  await symlink(path.join(pluginDir, '..', '..', 'node_modules'), path.join(dir, 'node_modules'))
  const built = spawnSync(process.execPath, [path.join(dir, 'scripts', 'build.mjs')], {
    env: { ...process.env, LOOM_NATIVE_ISA: 'avx2' },
    encoding: 'utf8',
  })
  t.equal(built.status, 0, `build: ${built.stderr.slice(-500)}`)
  const addon = createRequire(import.meta.url)(path.join(dir, 'build', 'Release', 'loom_native.node')) as NativeAddon
  t.equal(addon.isa, 'avx2')
  const result = await addon.kernelSelfTest(5, 2)
  t.comment(result.report.trimEnd())
  t.ok(result.cases > 500, `${result.cases} cases ran`)
  t.equal(result.failures, 0, `worst: ${result.worstCase}`)
})
