/**
 * Wait for `promise`, but give up with `signal.reason` as soon as `signal` aborts. The work itself
 * goes on: this is how one caller leaves a call that several callers share (one metadata request
 * for many concurrent resolves) without cancelling it for the others.
 */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as unknown)
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as unknown)
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort)
        resolve(value)
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort)
        reject(err)
      },
    )
  })
}
