import type { Logger } from '../contracts/logger.ts'

/**
 * Times the phases of bringing a model up (weights, speculator, preloaded adapters) and logs each
 * as it starts and ends, so an operator watching a slow start sees where it is and what took long.
 */
export class StartupPhases {
  readonly #logger: Logger
  readonly #seconds: Record<string, number> = {}
  readonly #startedAt = performance.now()

  constructor(logger: Logger) {
    this.#logger = logger
  }

  /** Run one phase: `what` says what it does ("loading the model weights"). */
  async run<T>(phase: string, what: string, work: () => Promise<T>): Promise<T> {
    this.#logger.info({ phase }, what)
    const started = performance.now()
    const result = await work()
    const seconds = round((performance.now() - started) / 1000)
    this.#seconds[phase] = seconds
    this.#logger.info({ phase, seconds }, `${what}: done in ${seconds} s`)
    return result
  }

  /** Each finished phase's seconds, and the total since construction. */
  summary(): { phases: Readonly<Record<string, number>>; total_s: number } {
    return { phases: { ...this.#seconds }, total_s: round((performance.now() - this.#startedAt) / 1000) }
  }
}

function round(seconds: number): number {
  return Math.round(seconds * 1000) / 1000
}
