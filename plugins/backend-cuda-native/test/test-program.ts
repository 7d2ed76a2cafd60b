// Builds and runs the standalone native test program (native/test-program: the kernel self-test
// without Node) in a temp folder, for the tests that need it. One build per option set per test
// process; the folder is removed when the process's tests end.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const sourceDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'native', 'test-program')

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
    child.stdout.on('data', (d: Buffer) => (output += d.toString()))
    child.stderr.on('data', (d: Buffer) => (output += d.toString()))
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
    build = (async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'loom-native-test-'))
      process.once('exit', () => rmSync(dir, { recursive: true, force: true }))
      const d = Object.entries(defs).map(([k, v]) => `-D${k}=${v}`)
      const configured = await run('cmake', ['-S', sourceDir, '-B', dir, ...d])
      if (configured.status !== 0) return { error: `cmake configure: ${configured.output.slice(-1500)}` }
      const jobs = String(Math.max(2, os.availableParallelism()))
      const built = await run('cmake', ['--build', dir, '-j', jobs])
      if (built.status !== 0) return { error: `cmake build: ${built.output.slice(-1500)}` }
      return { program: path.join(dir, 'loom-native-test') }
    })()
    builds.set(key, build)
  }
  return build
}
