/**
 * The merge worker's module: receives one `MergeJob`, runs `mergeLoraWeights` on this thread and
 * posts back a `MergeReply`, transferring the merged factors (no copy). Merging re-factors dense
 * updates with SVDs: seconds to minutes of arithmetic that must not run on the server's event loop.
 */
import { parentPort } from 'node:worker_threads'
import type { LoraModule, LoraModuleWeights, LoraWeights } from '../../contracts/step-runner.ts'
import { mergeLoraWeights, type MergeReport } from './merge-lora.ts'
import type { MergedAdaptersRequest } from './merge-params.ts'

/** What the event loop sends: everything `mergeLoraWeights` needs, as plain data. */
export interface MergeJob {
  readonly inputs: readonly LoraWeights[]
  readonly request: Pick<MergedAdaptersRequest, 'weights' | 'strategy' | 'density' | 'majoritySignMethod' | 'seed'>
  readonly key: string
  readonly maxRank: number
  /** `[outFeatures, inFeatures]` per projection (a function cannot cross threads). */
  readonly shapes: Readonly<Record<LoraModule, readonly [number, number]>>
}

/** What the worker answers: the merge, or the message of what went wrong. */
export type MergeReply =
  | { readonly ok: true; readonly weights: LoraWeights; readonly report: MergeReport }
  | { readonly ok: false; readonly message: string }

/** Every buffer behind the merged factors, once each (a transfer list must not repeat one). */
function buffersOf(weights: LoraWeights): ArrayBuffer[] {
  const seen = new Set<ArrayBuffer>()
  for (const layer of weights.layers) {
    for (const w of Object.values(layer) as LoraModuleWeights[]) {
      seen.add(w.a.buffer as ArrayBuffer)
      seen.add(w.b.buffer as ArrayBuffer)
    }
  }
  return [...seen]
}

const port = parentPort
if (port) {
  port.once('message', async (job: MergeJob) => {
    let reply: MergeReply
    try {
      const { weights, report } = await mergeLoraWeights(job.inputs, job.request, job.key, {
        maxRank: job.maxRank,
        shape: (module) => job.shapes[module],
      })
      port.postMessage({ ok: true, weights, report } satisfies MergeReply, buffersOf(weights))
      return
    } catch (err) {
      reply = { ok: false, message: err instanceof Error ? err.message : String(err) }
    }
    port.postMessage(reply)
  })
}
