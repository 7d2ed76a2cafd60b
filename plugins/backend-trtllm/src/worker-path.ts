/**
 * Finding TensorRT-LLM's `executorWorker`, the binary its executor spawns (MPI_Comm_spawn) once per
 * rank in orchestrator mode, and checking it at startup: a wrong path would otherwise fail inside MPI,
 * after the server said it was starting, often by aborting the process.
 */
import { accessSync, constants, statSync } from 'node:fs'
import path from 'node:path'
import { LoomError } from '@loom/core'

/** The binary's name as TensorRT-LLM installs it (`setup.py` ships `bin/executorWorker`). */
export const EXECUTOR_WORKER = 'executorWorker'

/** Where the default `worker_path` is looked for. */
export interface WorkerPathHints {
  /** `TRTLLM_ROOT` at run time: the pip wheel's `site-packages/tensorrt_llm`, which has `bin/executorWorker`. */
  readonly trtllmRoot?: string
  /** The `libtensorrt_llm.so` the addon runs on (`capabilities.libraryPath`). */
  readonly libraryPath?: string
}

/**
 * The places a TensorRT-LLM installation puts `executorWorker`, most specific first: `<root>/bin`
 * (the wheel), then relative to the library: `<lib>/../bin` (the wheel's `libs/` beside `bin/`),
 * `<lib>` itself, and `<lib>/executor_worker` (a CMake build tree, `cpp/build/tensorrt_llm`).
 */
export function workerPathCandidates(hints: WorkerPathHints): string[] {
  const out: string[] = []
  if (hints.trtllmRoot) out.push(path.resolve(hints.trtllmRoot, 'bin', EXECUTOR_WORKER))
  if (hints.libraryPath) {
    const lib = path.dirname(path.resolve(hints.libraryPath))
    out.push(
      path.join(lib, '..', 'bin', EXECUTOR_WORKER),
      path.join(lib, EXECUTOR_WORKER),
      path.join(lib, 'executor_worker', EXECUTOR_WORKER),
    )
  }
  return [...new Set(out.map((p) => path.normalize(p)))]
}

/** Why `file` cannot be spawned, or null when it is an executable regular file. */
function unusable(file: string): string | null {
  try {
    if (!statSync(file).isFile()) return 'is not a file'
  } catch {
    return 'does not exist'
  }
  try {
    accessSync(file, constants.X_OK)
    return null
  } catch {
    return 'is not executable'
  }
}

/**
 * The absolute `executorWorker` for `world` ranks: `workerPath` (the option, already absolute) when
 * given, else the first candidate that exists. Throws `native_addon_missing` with `param: 'worker_path'`
 * when the option names something unusable or no candidate exists.
 */
export function resolveWorkerPath(workerPath: string | undefined, world: number, hints: WorkerPathHints): string {
  const why = `tensor_parallel × pipeline_parallel = ${world} runs TensorRT-LLM in orchestrator mode, which spawns ${world} ${EXECUTOR_WORKER} processes with MPI`
  const fix =
    `Fix: set the plugin option \`worker_path\` to TensorRT-LLM's ${EXECUTOR_WORKER} (the pip wheel installs it as ` +
    `site-packages/tensorrt_llm/bin/${EXECUTOR_WORKER}), or set TRTLLM_ROOT to that tensorrt_llm directory; see ` +
    `plugins/backend-trtllm/README.md "Multi-GPU"`
  if (workerPath !== undefined) {
    const problem = unusable(workerPath)
    if (problem === null) return workerPath
    throw new LoomError(
      'native_addon_missing',
      { detail: `\`worker_path\` ${workerPath} ${problem}; ${why}. ${fix}.` },
      { param: 'worker_path' },
    )
  }
  const candidates = workerPathCandidates(hints)
  const found = candidates.find((p) => unusable(p) === null)
  if (found !== undefined) return found
  const looked =
    candidates.length > 0
      ? `none of ${candidates.join(', ')} is an executable file`
      : 'TRTLLM_ROOT is not set and the addon does not link TensorRT-LLM, so there is nowhere to look'
  throw new LoomError(
    'native_addon_missing',
    { detail: `\`worker_path\` is not set and ${looked}; ${why}. ${fix}.` },
    { param: 'worker_path' },
  )
}
