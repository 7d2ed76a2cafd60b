import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { stringify } from 'yaml'
import { loadConfig } from '../../src/config/index.ts'
import { LoomServer } from '../../src/server/loom-server.ts'

/** Everything a test needs from a running server, plus the log lines it wrote. */
export interface TestServer {
  readonly server: LoomServer
  readonly logs: string[]
  close(): Promise<void>
}

/**
 * Start a real Loom server (native CPU backend, local adapter source) over `modelDir`, configured
 * through a YAML file as a user would. `extra` is merged into the YAML document.
 */
export async function startTestServer(
  dir: string,
  modelDir: string,
  options: {
    adapterRoot?: string
    limits?: Record<string, number>
    plugins?: unknown[]
    nativeOptions?: object
    logLevel?: string
    preload?: { id: string; source?: string }[]
    /** Extra `adapters:` settings (download_attempts, resolve_ttl_s, auth_ttl_s, default_source, …). */
    adapters?: Record<string, unknown>
    /** The `metrics:` section. */
    metrics?: Record<string, unknown>
    /** The `speculation:` section. */
    speculation?: Record<string, unknown>
  } = {},
): Promise<TestServer> {
  await mkdir(dir, { recursive: true })
  const doc = {
    server: { port: 0, host: '127.0.0.1', log_level: options.logLevel ?? 'info' },
    model: { id: 'test-model', path: modelDir },
    limits: { max_total_tokens: 256, ...options.limits },
    adapters: {
      default_source: 'local',
      cache_dir: join(dir, 'cache'),
      preload: options.preload ?? [],
      ...options.adapters,
    },
    ...(options.metrics ? { metrics: options.metrics } : {}),
    ...(options.speculation ? { speculation: options.speculation } : {}),
    plugins: [
      {
        use: '@loom/backend-cuda-native',
        options: { device: 'cpu', threads: 2, kv_cache_tokens: 4096, max_lora_rank: 128, ...options.nativeOptions },
      },
      { use: '@loom/source-local', options: { roots: [options.adapterRoot ?? modelDir] } },
      ...(options.plugins ?? []),
    ],
  }
  const file = join(dir, 'loom.yaml')
  await writeFile(file, stringify(doc))
  const logs: string[] = []
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logs.push(chunk.toString('utf8'))
      done()
    },
  })
  const server = await LoomServer.create(await loadConfig(file), { logDestination: destination })
  try {
    await server.start()
  } catch (err) {
    await server.close()
    throw err
  }
  return { server, logs, close: () => server.close() }
}
