/**
 * Runs async tasks one at a time, in call order. The engine sends every runner call (step, adapter
 * load/unload, close) through one queue, so an adapter load never overlaps a forward step.
 */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve()

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task)
    // The chain must survive a failed task; the caller still sees the rejection through `result`.
    this.tail = result.catch(() => undefined)
    return result
  }
}
