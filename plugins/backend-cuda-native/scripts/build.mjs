#!/usr/bin/env node
// Build the native runtime (build/Release/loom_native.node) with node-gyp, offline.
//
// Run from anywhere: `node plugins/backend-cuda-native/scripts/build.mjs`. Node headers come
// from the running node's install prefix when it ships them (<prefix>/include/node), else from
// npm's `nodedir` setting; node-gyp is the workspace's copy, else the one bundled with npm.
// Prints one line about the cuda device, which is not built yet.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const require = createRequire(path.join(pluginDir, 'package.json'))

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

const nodeGyp = findNodeGyp()
if (!nodeGyp) {
  console.error('backend-cuda-native: node-gyp not found (neither in node_modules nor bundled with npm); cannot build')
  process.exit(1)
}
const args = [nodeGyp, 'rebuild', `--jobs=${Math.max(2, os.cpus().length)}`, '--loglevel=warn']
// LOOM_NATIVE_ISA=avx2: the AVX2 + FMA + F16C kernels even where AVX-512 is present (binding.gyp).
if (process.env.LOOM_NATIVE_ISA) args.push(`--loom_isa=${process.env.LOOM_NATIVE_ISA}`)
const nodeDir = findNodeDir()
if (nodeDir) args.push(`--nodedir=${nodeDir}`)

const started = Date.now()
const result = spawnSync(process.execPath, args, { cwd: pluginDir, stdio: 'inherit' })
if (result.status !== 0) {
  console.error(`backend-cuda-native: native build failed (node-gyp exit ${result.status ?? result.signal})`)
  process.exit(result.status ?? 1)
}

const nvcc = findOnPath('nvcc')
const seconds = ((Date.now() - started) / 1000).toFixed(1)
console.warn(
  nvcc
    ? `backend-cuda-native: built the cpu device in ${seconds}s; nvcc found at ${nvcc}, but the cuda device is not built yet (skipped)`
    : `backend-cuda-native: built the cpu device in ${seconds}s; cuda device skipped (no nvcc on PATH)`,
)
