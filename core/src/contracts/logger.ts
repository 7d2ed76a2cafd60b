/**
 * The logging surface plugins receive: pino's method shape, without tying plugins to pino.
 * Objects go first, the message second; secrets are redacted by the core's logger, but plugins
 * must still never pass a token as a message.
 */
export interface Logger {
  debug(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
  child(bindings: Record<string, unknown>): Logger
}
