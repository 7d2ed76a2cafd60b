import { LoomError } from '../errors/index.ts'

/**
 * The lifecycle every `Backend` shares (after undici's `DispatcherBase`):
 * - `close()` refuses new work from then on, lets the running work finish, shuts the backend down
 *   and resolves;
 * - `destroy(err)` fails all work now (with `err`, or `server_closing`) and shuts down; `close()`
 *   then resolves once the shutdown is done.
 * Both are idempotent, and `destroy` after `close` hurries it.
 *
 * A subclass refuses work where it takes it while `closing` (`server_closing`), calls `workDone()`
 * whenever a piece of work ends, and says what idle, failing everything and shutting down mean for
 * it. Shutdown runs once.
 */
export abstract class BackendLifecycle {
  #closing = false
  #destroyed = false
  #closed: Promise<void> | null = null
  #resolveClosed: (() => void) | null = null
  #shutdownStarted = false

  /** True from `close()` or `destroy()` on: new work is refused with `server_closing`. */
  protected get closing(): boolean {
    return this.#closing
  }

  /** True from `destroy()` on: nothing more runs. */
  protected get destroyed(): boolean {
    return this.#destroyed
  }

  close(): Promise<void> {
    if (this.#closed === null) {
      this.#closing = true
      this.#closed = new Promise<void>((resolve) => {
        this.#resolveClosed = resolve
      })
      this.workDone()
    }
    return this.#closed
  }

  destroy(err?: Error): void {
    if (this.#destroyed) return
    this.#destroyed = true
    this.#closing = true
    this.#closed ??= new Promise<void>((resolve) => {
      this.#resolveClosed = resolve
    })
    this.failAll(err ?? new LoomError('server_closing'))
    this.#shutdownOnce()
  }

  /** Call whenever work ends: once closing and idle, the backend shuts down and `close()` resolves. */
  protected workDone(): void {
    if (this.#closing && this.isIdle()) this.#shutdownOnce()
  }

  /** No work is queued or running (nothing `close()` must wait for). */
  protected abstract isIdle(): boolean

  /** Fail every queued and running piece of work with `reason` (`destroy`). */
  protected abstract failAll(reason: Error): void

  /**
   * Release what the backend holds (a runner, an executor). Called once, when closing and idle or
   * on `destroy`; `close()` resolves when it settles, so it should log its own failures.
   */
  protected abstract shutdown(): Promise<void>

  #shutdownOnce(): void {
    if (this.#shutdownStarted) return
    this.#shutdownStarted = true
    void this.shutdown()
      .catch(() => undefined)
      .finally(() => this.#resolveClosed?.())
  }
}
