// Builds and runs the standalone native test program (native/test-program: the kernel self-test
// and the model check, without Node) for the tests that need it. Builds live in
// build/test-program/<options> and are shared by every test process (tap runs test files in
// parallel): one builds under a lock while the others wait, then CMake's incremental build makes
// the rest near no-ops. A full build takes a minute or two on a 2-core machine; two test files
// each building their own copy was the largest single cost of `npm test`.
import { createHash } from 'node:crypto'
import { spawn } from 'node:child_process'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

const pluginDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const sourceDir = path.join(pluginDir, 'native', 'test-program')
const buildRoot = path.join(pluginDir, 'build', 'test-program')

/** Hold `lockDir` (created atomically) while `work` runs; a lock whose owner died is taken over. */
async function withLock<T>(lockDir: string, work: () => Promise<T>): Promise<T> {
  mkdirSync(path.dirname(lockDir), { recursive: true })
  for (;;) {
    try {
      mkdirSync(lockDir)
      writeFileSync(path.join(lockDir, 'pid'), String(process.pid))
      break
    } catch {
      let owner = NaN
      try {
        owner = Number(readFileSync(path.join(lockDir, 'pid'), 'utf8'))
      } catch {
        // Being created right now: wait for its pid.
      }
      if (Number.isInteger(owner) && !isAlive(owner)) rmSync(lockDir, { recursive: true, force: true })
      else await sleep(250)
    }
  }
  try {
    return await work()
  } finally {
    rmSync(lockDir, { recursive: true, force: true })
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** Exit code and the combined output of a child process. */
export interface RunResult {
  readonly status: number | null
  readonly output: string
}

/** Run a command to completion without blocking the event loop (tap's timers keep running). */
export function run(cmd: string, args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    // Decoded as streams: a multi-byte character (the tables' µ) split across two chunks must not
    // turn into two replacement characters.
    child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d))
    child.on('error', (err) => resolve({ status: null, output: `${output}${err.message}` }))
    child.on('close', (status) => resolve({ status, output }))
  })
}

const builds = new Map<string, Promise<{ program: string } | { error: string }>>()

/**
 * Configure and build the program with these CMake definitions (`LOOM_CUDA=OFF`, `LOOM_AVX2=ON`,
 * ...); resolves to the executable or to the build's failure (its last lines).
 */
export function buildTestProgram(defs: Record<string, string>): Promise<{ program: string } | { error: string }> {
  const key = JSON.stringify(defs)
  let build = builds.get(key)
  if (!build) {
    const dir = path.join(buildRoot, createHash('sha256').update(key).digest('hex').slice(0, 12))
    build = withLock(`${dir}.lock`, async () => {
      const d = Object.entries(defs).map(([k, v]) => `-D${k}=${v}`)
      const configured = await run('cmake', ['-S', sourceDir, '-B', dir, ...d])
      if (configured.status !== 0) return { error: `cmake configure: ${configured.output.slice(-1500)}` }
      const jobs = String(Math.max(2, os.availableParallelism()))
      const built = await run('cmake', ['--build', dir, '-j', jobs])
      if (built.status !== 0) return { error: `cmake build: ${built.output.slice(-1500)}` }
      return { program: path.join(dir, 'loom-native-test') }
    })
    builds.set(key, build)
  }
  return build
}
