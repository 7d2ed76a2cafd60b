import { pino, type DestinationStream, type Level, type Logger, type LoggerOptions } from 'pino'
import { serializeError, serializeReply, serializeRequest } from './log-serializers.ts'
import { redactObject } from './redact-object.ts'
import { REDACTED, redactSecrets } from './redact-secrets.ts'

/** The server's logger: a pino logger whose output never carries a secret. */
export type LoomLogger = Logger

export interface CreateLoggerOptions {
  /** Lowest level written; `silent` writes nothing. */
  readonly level: Level | 'silent'
  /** Where log lines go (newline-delimited JSON); stdout when absent. Tests pass a capturing stream. */
  readonly destination?: DestinationStream
}

// Fixed paths pino redacts at serialization time. The deep walk in `formatters.log` already covers
// logged objects; these paths also apply to child-logger bindings (which pino does not pass through
// `formatters.bindings` for children) and to what serializers return.
const SECRET_NAMES = [
  'api_token',
  'apiToken',
  'token',
  'accessToken',
  'access_token',
  'authorization',
  'password',
  'secret',
  'secretAccessKey',
  'aws_secret_access_key',
  'sessionToken',
]
const REDACT_PATHS = [
  ...SECRET_NAMES,
  ...SECRET_NAMES.map((name) => `*.${name}`),
  'req.headers.authorization',
  'req.headers["proxy-authorization"]',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
]

/**
 * Create the server's logger. Secrets are removed at every entrance:
 * - logged objects (and child bindings) are walked at any depth: `api_token`, `token`,
 *   `apiToken`, `accessToken`, `authorization`, AWS secret keys and similar fields become
 *   `[Redacted]`, and every string goes through `redactSecrets`;
 * - message strings and format arguments go through `redactSecrets`;
 * - `req` logs method and URL (redacted) but never headers or bodies; `err` logs a redacted
 *   standard error record.
 * Pass it to fastify as `loggerInstance`; fastify's request logging then uses these serializers.
 */
export function createLogger(options: CreateLoggerOptions): LoomLogger {
  const pinoOptions: LoggerOptions = {
    level: options.level,
    redact: { paths: REDACT_PATHS, censor: REDACTED },
    serializers: { req: serializeRequest, res: serializeReply, err: serializeError },
    formatters: {
      log: (object) => redactObject(object),
      bindings: (bindings) => redactObject(bindings),
    },
    hooks: {
      logMethod(args, method) {
        const cleaned: unknown[] = args.map((arg: unknown) => (typeof arg === 'string' ? redactSecrets(arg) : arg))
        // `log.error(err)` makes pino use `err.message` as the message, unredacted: supply it.
        const [first] = cleaned
        if (first instanceof Error && typeof cleaned[1] !== 'string') cleaned.splice(1, 0, redactSecrets(first.message))
        method.apply(this, cleaned as Parameters<typeof method>)
      },
    },
  }
  return options.destination ? pino(pinoOptions, options.destination) : pino(pinoOptions)
}
