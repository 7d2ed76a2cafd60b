import type { GenerationRequest } from '../../generation/generation-request.ts'
import type {
  GenerationEvent,
  GenerationResult,
  GenerationService,
  StartedGeneration,
} from '../../generation/generation-service.ts'
import { LoomError } from '../../errors/index.ts'

/** One choice's generation request: `n` copies of a prompt differ only in their seed. */
export function choiceRequests(requests: readonly GenerationRequest[], n: number): GenerationRequest[] {
  const out: GenerationRequest[] = []
  for (const request of requests) {
    for (let i = 0; i < n; i++) {
      const seed = request.sampling.seed
      // With an explicit seed, choice i uses seed + i: reproducible, yet the n choices differ.
      out.push(
        seed === undefined || i === 0
          ? request
          : { ...request, sampling: { ...request.sampling, seed: (seed + BigInt(i)) & 0xffffffffffffffffn } },
      )
    }
  }
  return out
}

/**
 * Start every choice. They run concurrently (and batch together); if one fails to start, the others
 * are cancelled and the first error is thrown, so the client gets one clean error status.
 * `describeError` re-addresses that error to the request that failed (its index in `requests`).
 */
export async function startChoices(
  service: GenerationService,
  requests: readonly GenerationRequest[],
  signal: AbortSignal,
  describeError: (err: unknown, index: number) => unknown = (err) => err,
): Promise<StartedGeneration[]> {
  const controller = new AbortController()
  const onAbort = () => controller.abort(signal.reason)
  signal.addEventListener('abort', onAbort, { once: true })
  const settled = await Promise.allSettled(requests.map((r) => service.start(r, controller.signal)))
  const failed = settled.findIndex((s) => s.status === 'rejected')
  if (failed >= 0) {
    controller.abort()
    signal.removeEventListener('abort', onAbort)
    throw describeError((settled[failed] as PromiseRejectedResult).reason, failed)
  }
  return settled.map((s) => (s as PromiseFulfilledResult<StartedGeneration>).value)
}

/** Wait for every choice's result. */
export async function finishChoices(started: readonly StartedGeneration[]): Promise<GenerationResult[]> {
  return Promise.all(started.map(finishOne))
}

async function finishOne(started: StartedGeneration): Promise<GenerationResult> {
  for await (const event of started.events) if (event.type === 'end') return event.result
  throw new LoomError('generation_error', { detail: 'generation ended without a result' })
}

/** Interleave the choices' events as they arrive, tagged with the choice index. */
export async function* mergeChoices(
  started: readonly StartedGeneration[],
): AsyncGenerator<{ index: number; event: GenerationEvent }> {
  const iterators = started.map((s) => s.events[Symbol.asyncIterator]())
  const next = (index: number) => iterators[index]!.next().then((result) => ({ index, result }))
  const pending = new Map(iterators.map((_, i) => [i, next(i)]))
  try {
    while (pending.size > 0) {
      const { index, result } = await Promise.race(pending.values())
      if (result.done) {
        pending.delete(index)
        continue
      }
      pending.set(index, next(index))
      yield { index, event: result.value }
    }
  } finally {
    // A client that went away (or an error) cancels every choice still running.
    await Promise.allSettled(iterators.map((it) => it.return?.()))
  }
}
