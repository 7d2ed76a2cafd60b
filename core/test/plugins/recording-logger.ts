import type { Logger } from '../../src/contracts/index.ts'

/** One call to a `RecordingLogger` method, with the child bindings merged in. */
export interface LogEntry {
  readonly level: 'debug' | 'info' | 'warn' | 'error'
  readonly obj: Record<string, unknown>
  readonly msg: string | undefined
}

/** A Logger that keeps every entry in memory (shared by its children), for assertions. */
export class RecordingLogger implements Logger {
  constructor(
    readonly entries: LogEntry[] = [],
    private readonly bindings: Record<string, unknown> = {},
  ) {}

  debug(obj: object, msg?: string): void {
    this.entries.push({ level: 'debug', obj: { ...this.bindings, ...obj }, msg })
  }
  info(obj: object, msg?: string): void {
    this.entries.push({ level: 'info', obj: { ...this.bindings, ...obj }, msg })
  }
  warn(obj: object, msg?: string): void {
    this.entries.push({ level: 'warn', obj: { ...this.bindings, ...obj }, msg })
  }
  error(obj: object, msg?: string): void {
    this.entries.push({ level: 'error', obj: { ...this.bindings, ...obj }, msg })
  }
  child(bindings: Record<string, unknown>): Logger {
    return new RecordingLogger(this.entries, { ...this.bindings, ...bindings })
  }

  /** The `event` field of every entry that has one, in order (fixture plugins log their lifecycle). */
  events(): string[] {
    return this.entries.flatMap((e) => (typeof e.obj.event === 'string' ? [e.obj.event] : []))
  }
}
