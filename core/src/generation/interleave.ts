/** One pull from source `index`: its next result, or what it threw. Never a rejected promise. */
type Pull<T> =
  { readonly index: number; readonly result: IteratorResult<T> } | { readonly index: number; readonly error: unknown }

/**
 * Interleave async iterables: each value, tagged with its source's index, as soon as it arrives.
 * A source's failure is thrown from here, and stops the others.
 *
 * Written so that nothing it starts can become an unhandled rejection, whatever the consumer
 * does. A pull settles to a value even when its source throws (the error is rethrown here, in the
 * consumer's frame), and a source is pulled again only when the consumer asks for more, so a
 * consumer that stops at a value (a client that left) leaves no pull behind. Before, the next
 * event was requested before the current one was handed on; when the client left in between,
 * that pull rejected with `request_cancelled` and nobody was awaiting it: the process exited.
 *
 * When the consumer stops early, or a source fails, every other source's `return()` is called
 * (for a generation, that cancels it) without waiting: a source whose pull is in flight finishes
 * that pull first, and waiting for it could hold the caller until a queued request is admitted.
 */
export async function* interleave<T>(
  sources: readonly AsyncIterable<T>[],
): AsyncGenerator<{ index: number; value: T }, void, undefined> {
  const iterators = sources.map((source) => source[Symbol.asyncIterator]())
  const pull = (index: number): Promise<Pull<T>> =>
    iterators[index]!.next().then(
      (result) => ({ index, result }),
      (error: unknown) => ({ index, error }),
    )
  const pending = new Map(iterators.map((_, index) => [index, pull(index)]))
  const ended = new Set<number>()
  try {
    while (pending.size > 0) {
      const step = await Promise.race(pending.values())
      pending.delete(step.index)
      if ('error' in step) {
        ended.add(step.index)
        throw step.error
      }
      if (step.result.done === true) {
        ended.add(step.index)
        continue
      }
      yield { index: step.index, value: step.result.value }
      pending.set(step.index, pull(step.index))
    }
  } finally {
    for (const [index, iterator] of iterators.entries()) {
      if (!ended.has(index)) iterator.return?.().catch(() => undefined)
    }
  }
}
