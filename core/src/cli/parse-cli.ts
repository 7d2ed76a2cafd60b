import { parseArgs } from 'node:util'
import { LoomError } from '../errors/index.ts'

/** What `loom serve` was asked to do, after argv and environment are read. */
export interface ServeCommand {
  readonly command: 'serve'
  /** `--config` value, if given (the config module resolves `LOOM_CONFIG` and the default). */
  readonly config: string | undefined
  readonly host: string | undefined
  readonly port: number | undefined
}

export type CliCommand = ServeCommand | { readonly command: 'help' }

export const USAGE = `Usage: loom serve [--config PATH] [--host HOST] [--port PORT]

  --config PATH   configuration file (default: $LOOM_CONFIG, else config/default.yaml)
  --host HOST     address to listen on (overrides server.host)
  --port PORT     port to listen on (overrides server.port; also $PORT)
`

function parsePort(text: string, from: string): number {
  const port = Number(text)
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new LoomError('bad_request', {
      detail: `${from} must be a port number 0-65535; found ${JSON.stringify(text)}`,
    })
  }
  return port
}

/** Parse `argv` (without node and script) and the environment. Unknown flags are errors. */
export function parseCli(argv: readonly string[], env: NodeJS.ProcessEnv): CliCommand {
  let parsed
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        config: { type: 'string' },
        host: { type: 'string' },
        port: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    })
  } catch (err) {
    throw new LoomError('bad_request', { detail: `${(err as Error).message}\n${USAGE}` })
  }
  const { values, positionals } = parsed
  if (values.help || positionals.length === 0) return { command: 'help' }
  if (positionals[0] !== 'serve' || positionals.length > 1) {
    throw new LoomError('bad_request', { detail: `unknown command ${JSON.stringify(positionals.join(' '))}\n${USAGE}` })
  }
  const port =
    values.port !== undefined
      ? parsePort(values.port, '--port')
      : env.PORT !== undefined && env.PORT !== ''
        ? parsePort(env.PORT, 'PORT')
        : undefined
  return { command: 'serve', config: values.config, host: values.host, port }
}
