#!/usr/bin/env node
// Build the TensorRT-LLM addon (build/Release/loom_trtllm.node) with node-gyp, offline.
//
// Run from anywhere: `node plugins/backend-trtllm/scripts/build.mjs`. Without TRTLLM_ROOT the addon links
// the fake executor (native/src/fake-executor.cc) and the build says so in one line. With it, the addon
// links TensorRT-LLM through native/src/trtllm-executor.cc:
//   TRTLLM_ROOT      a TensorRT-LLM installation: <root>/include/tensorrt_llm/executor/executor.h and
//                    <root>/lib (or <root>/libs, the pip wheel's layout) with libtensorrt_llm.so
//   TRTLLM_LIB_DIR   the library directory, when it is elsewhere
//   TRTLLM_CXX11_ABI 0 or 1: _GLIBCXX_USE_CXX11_ABI of the library (default: read off it with nm, else 1)
//   CUDA_HOME        CUDA toolkit for cuda_fp16.h & co. (default /usr/local/cuda)
// Guided decoding (GuidedDecodingParams, 1.x) is detected in the headers, so one source file builds
// against the 2024-10 upstream main and every 1.x release.
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const require = createRequire(path.join(pluginDir, 'package.json'))
const say = (line) => console.warn(`backend-trtllm: ${line}`)

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

function fail(message) {
  say(message)
  process.exit(1)
}

// The gyp variables for a TensorRT-LLM build, or null for the fake.
function trtllmVariables() {
  const root = process.env.TRTLLM_ROOT
  if (!root) return null
  const executorH = path.join(root, 'include', 'tensorrt_llm', 'executor', 'executor.h')
  if (!existsSync(executorH)) fail(`TRTLLM_ROOT=${root} has no include/tensorrt_llm/executor/executor.h`)
  const lib =
    process.env.TRTLLM_LIB_DIR ??
    [path.join(root, 'lib'), path.join(root, 'libs')].find((d) => existsSync(path.join(d, 'libtensorrt_llm.so')))
  if (!lib || !existsSync(path.join(lib, 'libtensorrt_llm.so')))
    fail(`no libtensorrt_llm.so in ${root}/lib or ${root}/libs; set TRTLLM_LIB_DIR`)
  const cudaInclude = path.join(process.env.CUDA_HOME ?? '/usr/local/cuda', 'include')
  if (!existsSync(path.join(cudaInclude, 'cuda_fp16.h'))) fail(`no cuda_fp16.h in ${cudaInclude}; set CUDA_HOME`)
  const executor = readFileSync(executorH, 'utf8')
  return {
    trtllm_root: root,
    trtllm_lib: lib,
    cuda_include: cudaInclude,
    trtllm_cxx11_abi: cxx11Abi(lib),
    trtllm_guided_decoding: /class GuidedDecodingParams\b/.test(executor) ? '1' : '0',
  }
}

// The library's _GLIBCXX_USE_CXX11_ABI: its getErrorMsg returns std::__cxx11::string under ABI 1.
function cxx11Abi(lib) {
  const given = process.env.TRTLLM_CXX11_ABI
  if (given === '0' || given === '1') return given
  if (given) fail(`TRTLLM_CXX11_ABI must be 0 or 1; got ${given}`)
  const nm = spawnSync('nm', ['-DC', path.join(lib, 'libtensorrt_llm.so')], { encoding: 'utf8', maxBuffer: 1 << 30 })
  if (nm.status !== 0) {
    say('cannot run nm on libtensorrt_llm.so; assuming _GLIBCXX_USE_CXX11_ABI=1 (set TRTLLM_CXX11_ABI)')
    return '1'
  }
  return /getErrorMsg\[abi:cxx11\]/.test(nm.stdout) ? '1' : '0'
}

const nodeGyp = findNodeGyp()
if (!nodeGyp) fail('node-gyp not found (neither in node_modules nor bundled with npm); cannot build')
const vars = trtllmVariables()
const args = [nodeGyp, 'rebuild', `--jobs=${Math.max(2, os.cpus().length)}`, '--loglevel=warn']
for (const [k, v] of Object.entries(vars ?? {})) args.push(`--${k}=${v}`)
const nodeDir = findNodeDir()
if (nodeDir) args.push(`--nodedir=${nodeDir}`)

const started = Date.now()
const result = spawnSync(process.execPath, args, { cwd: pluginDir, stdio: 'inherit' })
if (result.status !== 0) fail(`native build failed (node-gyp exit ${result.status ?? result.signal})`)
const seconds = ((Date.now() - started) / 1000).toFixed(1)
say(
  vars
    ? `built the addon against TensorRT-LLM in ${vars.trtllm_root} in ${seconds}s (_GLIBCXX_USE_CXX11_ABI=${vars.trtllm_cxx11_abi}, guided decoding ${vars.trtllm_guided_decoding === '1' ? 'on' : 'off'})`
    : `built the addon against the fake executor in ${seconds}s; TensorRT-LLM skipped (TRTLLM_ROOT not set)`,
)
