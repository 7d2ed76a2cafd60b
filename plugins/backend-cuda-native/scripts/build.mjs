#!/usr/bin/env node
// Build the native runtime (build/Release/loom_native.node) with node-gyp, offline.
//
// Run from anywhere: `node plugins/backend-cuda-native/scripts/build.mjs`. Node headers come
// from the running node's install prefix when it ships them (<prefix>/include/node), else from
// npm's `nodedir` setting; node-gyp is the workspace's copy, else the one bundled with npm.
//
// The cpu device is always built, with the vector flags the compiler and this CPU support
// (probed, not assumed). The cuda device is built when nvcc is found ($CUDA_HOME/bin, PATH, or
// /usr/local/cuda/bin): native/src/cuda/*.cu are compiled in parallel into build/cuda/libloom_cuda.a
// for sm_80, sm_86, sm_89 and sm_90a plus compute_90 PTX, and linked into the addon with the CUDA
// runtime linked statically. Without nvcc the build says so in one line.
//
// Environment:
//   LOOM_NATIVE_ISA=avx2   the AVX2 + FMA + F16C cpu kernels even where AVX-512 is present
//   LOOM_CUDA=0            build the cpu device alone even when nvcc is present
//   LOOM_CUDA_ARCHS=90     compute capabilities to compile for (comma-separated, e.g. 80,90a);
//                          default 80,86,89,90a, plus compute_90 PTX for GPUs newer than these
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const require = createRequire(path.join(pluginDir, 'package.json'))
const srcDir = path.join(pluginDir, 'native', 'src')

function findNodeGyp() {
  try {
    return require.resolve('node-gyp/bin/node-gyp.js')
  } catch {
    const bundled = path.join(
      path.dirname(process.execPath),
      '..',
      'lib',
      'node_modules',
      'npm',
      'node_modules',
      'node-gyp',
      'bin',
      'node-gyp.js',
    )
    return existsSync(bundled) ? bundled : null
  }
}

function findNodeDir() {
  if (process.env.npm_config_nodedir) return process.env.npm_config_nodedir
  const prefix = path.resolve(path.dirname(process.execPath), '..')
  return existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) ? prefix : null
}

function findOnPath(name) {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir && existsSync(path.join(dir, name))) return path.join(dir, name)
  }
  return null
}

/** nvcc and the toolkit root holding libcudart_static.a, or a reason why there is none. */
function findCuda() {
  if (process.env.LOOM_CUDA === '0') return { reason: 'LOOM_CUDA=0' }
  const candidates = [
    process.env.CUDA_HOME && path.join(process.env.CUDA_HOME, 'bin', 'nvcc'),
    findOnPath('nvcc'),
    '/usr/local/cuda/bin/nvcc',
  ].filter(Boolean)
  const nvcc = candidates.find((p) => existsSync(p))
  if (!nvcc) return { reason: 'no nvcc in $CUDA_HOME/bin, on PATH or in /usr/local/cuda/bin' }
  // nvcc may be a wrapper script elsewhere: ask it where its toolkit lives.
  const roots = [process.env.CUDA_HOME, path.resolve(path.dirname(nvcc), '..'), '/usr/local/cuda'].filter(Boolean)
  const probe = spawnSync(nvcc, ['--dryrun', '--version'], { encoding: 'utf8' })
  const top = /TOP=(\S+)/.exec(`${probe.stdout}${probe.stderr}`)
  if (top) roots.unshift(top[1])
  for (const root of roots) {
    for (const lib of ['lib64', 'lib', path.join('targets', 'x86_64-linux', 'lib')]) {
      const cudart = path.join(root, lib, 'libcudart_static.a')
      if (existsSync(cudart)) return { nvcc, cudart }
    }
  }
  return { reason: `nvcc found at ${nvcc}, but no libcudart_static.a next to it` }
}

/** -march flags this compiler accepts and this CPU runs: the cpu kernels need AVX2 + FMA + F16C. */
function cpuFlags() {
  const cxx = process.env.CXX || 'c++'
  const macros = (flags) => {
    const r = spawnSync(cxx, [...flags, '-dM', '-E', '-x', 'c++', '/dev/null'], { encoding: 'utf8' })
    return r.status === 0 ? r.stdout : null
  }
  const native = macros(['-march=native'])
  const has = (m, name) => m !== null && m.includes(`#define ${name} 1`)
  if (native && ['__AVX2__', '__FMA__', '__F16C__'].every((n) => has(native, n))) return { flags: ['-march=native'] }
  const explicit = ['-mavx2', '-mfma', '-mf16c']
  if (macros(explicit) === null) {
    console.error(`backend-cuda-native: ${cxx} accepts neither -march=native with AVX2 nor ${explicit.join(' ')}`)
    console.error('backend-cuda-native: the cpu device needs an x86-64 compiler and CPU with AVX2, FMA and F16C')
    process.exit(1)
  }
  return {
    flags: explicit,
    warning: native
      ? 'this CPU lacks AVX2/FMA/F16C: the addon is built for CPUs that have them and will not run here'
      : `${cxx} does not accept -march=native; built for AVX2 + FMA + F16C`,
  }
}

/** Run commands with at most `jobs` at once; resolves to the first failure's message or null. */
async function runAll(commands, jobs) {
  let next = 0
  let failure = null
  const worker = async () => {
    while (next < commands.length && !failure) {
      const { cmd, args, label } = commands[next++]
      const code = await new Promise((resolve) => {
        const child = spawn(cmd, args, { stdio: 'inherit' })
        child.on('error', () => resolve(-1))
        child.on('close', (c) => resolve(c))
      })
      if (code !== 0) failure = `${label} (exit ${code})`
    }
  }
  await Promise.all(Array.from({ length: jobs }, worker))
  return failure
}

/** Newest modification time among the headers the .cu files may include. */
function newestHeader(dir) {
  let newest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name)
    if (entry.isDirectory()) newest = Math.max(newest, newestHeader(p))
    else if (/\.(h|cuh)$/.test(entry.name)) newest = Math.max(newest, statSync(p).mtimeMs)
  }
  return newest
}

/** Compile native/src/cuda/*.cu into build/cuda/libloom_cuda.a; objects are reused when nothing changed. */
async function buildCudaLibrary(nvcc) {
  const archs = (process.env.LOOM_CUDA_ARCHS ?? '80,86,89,90a')
    .split(',')
    .map((a) => a.trim().replace(/^sm_/, ''))
    .filter(Boolean)
  const gencode = archs.flatMap((a) => ['-gencode', `arch=compute_${a},code=sm_${a}`])
  // PTX for GPUs newer than the list: the driver compiles it at first load.
  if (!process.env.LOOM_CUDA_ARCHS) gencode.push('-gencode', 'arch=compute_90,code=compute_90')
  const archText = archs.map((a) => `sm_${a}`).join(',') + (process.env.LOOM_CUDA_ARCHS ? '' : ',compute_90')
  const flags = [
    '-std=c++17',
    '-O3',
    `-I${srcDir}`,
    '-Xcompiler',
    '-fPIC',
    `-I${path.join(pluginDir, 'build', 'cuda')}`,
    ...gencode,
  ]
  const outDir = path.join(pluginDir, 'build', 'cuda')
  mkdirSync(outDir, { recursive: true })
  // The arch list reaches the probe's error message through a header: nvcc splits -D values on commas.
  const archHeader = path.join(outDir, 'cuda-archs.h')
  const archLine = `#define LOOM_CUDA_ARCHS_STR "${archText}"\n`
  if (!existsSync(archHeader) || readFileSync(archHeader, 'utf8') !== archLine) writeFileSync(archHeader, archLine)
  const flagsFile = path.join(outDir, 'flags.json')
  const flagsText = JSON.stringify({ flags, archText })
  const sameFlags = existsSync(flagsFile) && readFileSync(flagsFile, 'utf8') === flagsText
  const headers = newestHeader(srcDir)
  const cudaDir = path.join(srcDir, 'cuda')
  const sources = readdirSync(cudaDir)
    .filter((f) => f.endsWith('.cu'))
    .sort()
  const objects = sources.map((f) => path.join(outDir, f.replace(/\.cu$/, '.o')))
  const stale = sources
    .map((f, i) => ({ src: path.join(cudaDir, f), obj: objects[i] }))
    .filter(
      ({ src, obj }) =>
        !sameFlags || !existsSync(obj) || statSync(obj).mtimeMs < Math.max(statSync(src).mtimeMs, headers),
    )
  const jobs = Math.max(1, Math.min(stale.length, os.availableParallelism?.() ?? os.cpus().length))
  const failure = await runAll(
    stale.map(({ src, obj }) => ({ cmd: nvcc, args: [...flags, '-c', src, '-o', obj], label: path.basename(src) })),
    jobs,
  )
  if (failure) return { error: `nvcc failed on ${failure}` }
  writeFileSync(flagsFile, flagsText)
  const lib = path.join(outDir, 'libloom_cuda.a')
  rmSync(lib, { force: true })
  const ar = spawnSync('ar', ['rcs', lib, ...objects], { stdio: 'inherit' })
  if (ar.status !== 0) return { error: 'ar failed creating libloom_cuda.a' }
  return { lib, archText, compiled: stale.length, total: sources.length }
}

const nodeGyp = findNodeGyp()
if (!nodeGyp) {
  console.error('backend-cuda-native: node-gyp not found (neither in node_modules nor bundled with npm); cannot build')
  process.exit(1)
}
const started = Date.now()
const cpu = cpuFlags()
if (cpu.warning) console.warn(`backend-cuda-native: ${cpu.warning}`)
const cuda = findCuda()
let cudaLib = null
let cudaNote
if (cuda.nvcc) {
  const built = await buildCudaLibrary(cuda.nvcc)
  if (built.error) {
    console.error(`backend-cuda-native: ${built.error}`)
    process.exit(1)
  }
  cudaLib = built.lib
  cudaNote = `cuda device built for ${built.archText} with ${cuda.nvcc} (${built.compiled} of ${built.total} .cu files compiled)`
} else {
  cudaNote = `cuda device skipped (${cuda.reason})`
}

const gypArgs = [`--jobs=${Math.max(2, os.cpus().length)}`, '--loglevel=warn']
// LOOM_NATIVE_ISA=avx2: the AVX2 + FMA + F16C kernels even where AVX-512 is present (binding.gyp).
if (process.env.LOOM_NATIVE_ISA) gypArgs.push(`--loom_isa=${process.env.LOOM_NATIVE_ISA}`)
gypArgs.push(`--loom_cpu_flags=${cpu.flags.join(' ')}`)
if (cudaLib) gypArgs.push(`--loom_cuda_lib=${cudaLib}`, `--loom_cudart=${cuda.cudart}`)
const nodeDir = findNodeDir()
if (nodeDir) gypArgs.push(`--nodedir=${nodeDir}`)

// configure + build (not rebuild): rebuild would delete build/cuda, and make already recompiles
// whatever a changed flag or source affects.
for (const step of ['configure', 'build']) {
  const result = spawnSync(process.execPath, [nodeGyp, step, ...gypArgs], { cwd: pluginDir, stdio: 'inherit' })
  if (result.status !== 0) {
    console.error(`backend-cuda-native: native build failed (node-gyp ${step} exit ${result.status ?? result.signal})`)
    process.exit(result.status ?? 1)
  }
}

const seconds = ((Date.now() - started) / 1000).toFixed(1)
console.warn(`backend-cuda-native: built the cpu device (${cpu.flags.join(' ')}) in ${seconds}s; ${cudaNote}`)
