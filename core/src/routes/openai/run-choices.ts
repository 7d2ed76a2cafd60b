import type { GenerationRequest } from '../../generation/generation-request.ts'
import type {
  GenerationEvent,
  GenerationResult,
  GenerationService,
  StartedGeneration,
} from '../../generation/generation-service.ts'
import { LoomError } from '../../errors/index.ts'
import { interleave } from '../../generation/interleave.ts'

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
 * are cancelled and that first failure is thrown, so the client gets one clean error status.
 * `describeError` re-addresses that error to the request that failed (its index in `requests`).
 *
 * Each choice gets its own signal, fed by one listener on `signal`: with `n: 16` the request's
 * signal carried a listener per choice from every layer (sources, the backend) and Node warned of
 * a listener leak.
 */
export async function startChoices(
  service: GenerationService,
  requests: readonly GenerationRequest[],
  signal: AbortSignal,
  describeError: (err: unknown, index: number) => unknown = (err) => err,
): Promise<StartedGeneration[]> {
  const controllers = requests.map(() => new AbortController())
  const cancelAll = (reason: unknown) => {
    for (const controller of controllers) controller.abort(reason)
  }
  if (signal.aborted) cancelAll(signal.reason)
  else signal.addEventListener('abort', () => cancelAll(signal.reason), { once: true })
  let firstFailure: { index: number; err: unknown } | null = null
  const settled = await Promise.allSettled(
    requests.map((request, index) =>
      service.start(request, controllers[index]!.signal).catch((err: unknown) => {
        // The first failure is the client's answer; the cancellations it causes in the others are not.
        if (firstFailure === null) {
          firstFailure = { index, err }
          cancelAll(new LoomError('request_cancelled'))
        }
        throw err
      }),
    ),
  )
  const failure = firstFailure as { index: number; err: unknown } | null
  if (failure !== null) throw describeError(failure.err, failure.index)
  return settled.map((s) => (s as PromiseFulfilledResult<StartedGeneration>).value)
}

/**
 * Wait for every choice's result. If one fails, the others are cancelled (their `return()`; the
 * route aborts their signal too) and its error is thrown.
 */
export async function finishChoices(started: readonly StartedGeneration[]): Promise<GenerationResult[]> {
  const results: (GenerationResult | undefined)[] = started.map(() => undefined)
  for await (const { index, value } of mergeChoices(started)) {
    if (value.type === 'end') results[index] = value.result
  }
  if (results.some((r) => r === undefined)) {
    throw new LoomError('generation_error', { detail: 'generation ended without a result' })
  }
  return results as GenerationResult[]
}

/** Interleave the choices' events as they arrive, tagged with the choice index (see `interleave`). */
export function mergeChoices(
  started: readonly StartedGeneration[],
): AsyncGenerator<{ index: number; value: GenerationEvent }, void, undefined> {
  return interleave(started.map((s) => s.events))
}
