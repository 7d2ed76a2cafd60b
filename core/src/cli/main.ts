#!/usr/bin/env node
/**
 * `loom serve [--config PATH] [--host H] [--port P]`: load and validate the configuration, build the
 * server, listen, then load the model (`/health` answers 503 until it is ready). Any startup
 * failure prints one line `[code] message` and exits with status 1 before or instead of serving.
 */
import { chooseConfigPath, formatStartupError, loadConfig } from '../config/index.ts'
import { LoomServer } from '../server/loom-server.ts'
import { USAGE, parseCli } from './parse-cli.ts'

async function main(): Promise<number> {
  const command = parseCli(process.argv.slice(2), process.env)
  if (command.command === 'help') {
    process.stdout.write(USAGE)
    return 0
  }
  const config = await loadConfig(chooseConfigPath(process.argv.slice(2), process.env, process.cwd()))
  const server = await LoomServer.create(config)
  let stopping = false
  const stop = (signal: string) => {
    if (stopping) {
      // A second signal means "now": in-flight requests (a long merge, a slow source) are dropped.
      server.logger.warn({ signal }, 'second signal: exiting without draining')
      process.exit(1)
    }
    stopping = true
    server.logger.info({ signal }, 'shutting down: draining requests (send the signal again to exit at once)')
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(formatStartupError(err))
        process.exit(1)
      },
    )
  }
  // The last line of defence, not a way of handling errors: every path from a client's behaviour
  // is written so that no rejection goes unobserved (core/test/server/abort-storm.test.ts). Should
  // a bug (ours or a plugin's) leave one anyway, one request is lost, not every stream the server
  // carries: Node's default would exit the process.
  process.on('unhandledRejection', (reason) => {
    server.logger.error({ err: reason }, 'unhandled promise rejection (a bug: please report it); still serving')
  })
  process.on('SIGINT', () => stop('SIGINT'))
  process.on('SIGTERM', () => stop('SIGTERM'))
  try {
    await server.listen({ host: command.host, port: command.port })
    await server.start()
  } catch (err) {
    await server.close().catch(() => undefined)
    throw err
  }
  return -1
}

main().then(
  (code) => {
    if (code >= 0) process.exit(code)
  },
  (err: unknown) => {
    console.error(formatStartupError(err))
    process.exit(1)
  },
)
