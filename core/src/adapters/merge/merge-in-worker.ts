/**
 * `mergeLoraWeights` on a worker thread. The server's event loop only copies the inputs over and
 * receives the result, so streams, health checks and the engine's steps go on while a merge of
 * large adapters computes (on the event loop a single module's SVD stalled everything for
 * ~0.5 s at SmolLM2-135M's shapes, far longer on bigger models).
 */
import { Worker } from 'node:worker_threads'
import { LORA_MODULES, type LoraModule, type LoraWeights } from '../../contracts/step-runner.ts'
import { LoomError } from '../../errors/index.ts'
import type { MergeLoraOptions, MergeReport } from './merge-lora.ts'
import type { MergeJob, MergeReply } from './merge-worker.ts'

const BOOTSTRAP = new URL('./module-worker-bootstrap.mjs', import.meta.url)
const ENTRY = new URL('./merge-worker.ts', import.meta.url)

function failed(detail: string): LoomError {
  return new LoomError('internal_error', { detail: `merging adapters failed: ${detail}` })
}

/**
 * Same contract as `mergeLoraWeights`, computed on a new worker thread (one per merge: merges are
 * rare and cached, and a fresh worker frees its memory when it ends). Rejects with
 * `internal_error` when the worker throws or dies, and with `signal`'s reason (the worker
 * terminated) when it is aborted.
 */
export function mergeLoraWeightsInWorker(
  inputs: readonly LoraWeights[],
  request: MergeJob['request'],
  key: string,
  options: MergeLoraOptions,
  signal?: AbortSignal,
): Promise<{ weights: LoraWeights; report: MergeReport }> {
  const shapes = Object.fromEntries(LORA_MODULES.map((m) => [m, options.shape(m)])) as Record<
    LoraModule,
    readonly [number, number]
  >
  const job: MergeJob = { inputs, request, key, maxRank: options.maxRank, shapes }
  return new Promise((resolve, reject) => {
    const worker = new Worker(BOOTSTRAP, { workerData: { entry: ENTRY.href } })
    let settled = false
    const settle = (fn: () => void) => {
      if (settled) return
      settled = true
      fn()
      void worker.terminate()
    }
    worker.once('message', (reply: MergeReply) =>
      settle(() =>
        reply.ok ? resolve({ weights: reply.weights, report: reply.report }) : reject(failed(reply.message)),
      ),
    )
    worker.once('error', (err) => settle(() => reject(failed(err.message))))
    worker.once('exit', (code) =>
      settle(() => reject(failed(`the merge worker exited (code ${code}) without a result`))),
    )
    // Aborted (server shutdown): stop the arithmetic now rather than let it hold the drain.
    const abort = () => settle(() => reject(signal?.reason ?? failed('aborted')))
    if (signal?.aborted) abort()
    else signal?.addEventListener('abort', abort, { once: true })
    worker.postMessage(job)
  })
}
