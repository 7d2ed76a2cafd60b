// The cuda device from the outside: compiled into the addon whenever the build finds nvcc (as
// CI's machine has), chosen by `device: auto | cpu | cuda`, and refused with `cuda_unavailable`
// (cause and fix in the message) where no usable GPU is present. When nvcc is present the
// standalone test program is also built with the cuda device (one arch, to keep this quick) and
// must either run it or skip it with the factory's reason.
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { buildModel } from '@loom/testkit'
import { startTestServer } from '../../../core/test/server/test-server.ts'
import { NativeStepRunner, loadNative } from '../src/index.ts'
import { buildTestProgram, run } from './test-program.ts'

// The test program's build with nvcc (one arch): ~100 s alone on 2 cores, 235 s beside CI's other
// test files, where tap's 300 s per file expired once while other builds shared the cores (CI of
// 2026-11-28).
t.setTimeout(600_000)

/** The nvcc scripts/build.mjs would find (it also honours LOOM_CUDA=0). */
function findNvcc(): string | undefined {
  if (process.env.LOOM_CUDA === '0') return undefined
  const onPath = (process.env.PATH ?? '').split(path.delimiter).map((d) => path.join(d, 'nvcc'))
  const candidates = [process.env.CUDA_HOME && path.join(process.env.CUDA_HOME, 'bin', 'nvcc'), ...onPath]
  return [...candidates, '/usr/local/cuda/bin/nvcc'].find((p): p is string => !!p && existsSync(p))
}

const nvcc = findNvcc()
const addon = loadNative()
const cudaStatus = addon.cudaStatus()

t.test('the addon reports the devices compiled in', async (t) => {
  t.equal(addon.devices, nvcc ? 'cpu,cuda' : 'cpu', nvcc ? `nvcc at ${nvcc}: cuda compiled in` : 'no nvcc: cpu only')
  if (cudaStatus) {
    t.equal(cudaStatus.code, 'cuda_unavailable')
    t.match(cudaStatus.message, /Fix: /, `names the fix: ${cudaStatus.message}`)
  }
})

t.test('device selection', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'loom-native-device-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const model = path.join(dir, 'model')
  await buildModel(model, { arch: 'llama', hiddenSize: 32, numLayers: 1, numHeads: 2, numKvHeads: 1 })

  t.test('auto is the default and picks cuda only when it is usable', async (t) => {
    const runner = new NativeStepRunner(model, { threads: 1, kv_cache_tokens: 64 })
    t.equal(runner.options.device, 'auto')
    const spec = await runner.load()
    t.equal(spec.device, cudaStatus ? 'cpu' : 'cuda')
    await runner.close()
  })

  t.test('cpu is cpu', async (t) => {
    const runner = new NativeStepRunner(model, { device: 'cpu', threads: 1, kv_cache_tokens: 64 })
    t.equal((await runner.load()).device, 'cpu')
    await runner.close()
  })

  const gpu = !cudaStatus && 'a usable GPU is present'
  t.test('device: cuda without a usable GPU stops startup with cuda_unavailable', { skip: gpu }, async (t) => {
    await t.rejects(startTestServer(path.join(dir, 'server-cuda'), model, { nativeOptions: { device: 'cuda' } }), {
      code: 'cuda_unavailable',
      message: /^The cuda device cannot be used: .*Fix: /,
    })
  })

  t.test('the startup log and /info say which device runs', async (t) => {
    const server = await startTestServer(path.join(dir, 'server-auto'), model, { nativeOptions: { device: 'auto' } })
    t.teardown(() => server.close())
    const expected = cudaStatus ? 'cpu' : 'cuda'
    const line = server.logs
      .flatMap((chunk) => chunk.split('\n').filter(Boolean))
      .map((l) => JSON.parse(l) as { msg?: string })
      .find((l) => l.msg === 'native runtime device')
    t.match(line, { device: expected, requested: 'auto' })
    const info = await server.server.app.inject({ method: 'GET', url: '/info' })
    t.equal(info.json().model_device_type, expected)
  })
})

t.test('the test program builds with the cuda device and runs or skips it', { skip: !nvcc && 'no nvcc' }, async (t) => {
  const built = await buildTestProgram({ LOOM_CUDA: 'ON', CMAKE_CUDA_ARCHITECTURES: '80', CMAKE_CUDA_COMPILER: nvcc! })
  if ('error' in built) return t.fail(built.error)
  const result = await run(built.program, ['--seed', '1', '--device', 'cuda'])
  t.comment(result.output.trimEnd())
  t.match(result.output, /devices compiled in: cpu,cuda/)
  if (cudaStatus) {
    t.match(result.output, /^cuda .*skipped: .*Fix: /m, 'skipped with the reason')
    t.equal(result.status, 0)
    const required = await run(built.program, ['--seed', '1', '--device', 'cuda', '--require', 'cuda'])
    t.equal(required.status, 1, '--require cuda fails where cuda cannot run')
  } else {
    t.equal(result.status, 0, 'the cuda kernels pass the self-test')
  }
})
