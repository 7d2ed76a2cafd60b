import { randomBytes } from 'node:crypto'
import type { Test } from 'tap'
import { AdapterSource, AuthChecker, type Logger, type SourceContext } from '@loom/core'
import { FakeHub } from '@loom/testkit'
import { GLOBAL_TOKEN_SWITCHES, GLOBAL_TOKEN_VARIABLES } from '../src/global-token.ts'
import plugin from '../src/index.ts'

export const READER = 'hf_reader_0123456789abcdef'
export const STRANGER = 'hf_stranger_0123456789abcdef'
export const WEIGHTS = randomBytes(48 * 1024 + 5)
export const CONFIG = JSON.stringify({ peft_type: 'LORA', r: 8, lora_alpha: 16 })
export const ADAPTER = {
  'adapter_config.json': CONFIG,
  'adapter_model.safetensors': WEIGHTS,
  'tokenizer.json': '{"model":{}}',
  'README.md': '# not fetched',
}

/** A logger that keeps every line as text, so tests can look for leaked tokens. */
export function captureLogger(lines: string[]): Logger {
  const write = (level: string) => (obj: object, msg?: string) =>
    void lines.push(`${level} ${msg ?? ''} ${JSON.stringify(obj)}`)
  const logger: Logger = {
    debug: write('debug'),
    info: write('info'),
    warn: write('warn'),
    error: write('error'),
    child: () => logger,
  }
  return logger
}

/** A fake hub with public, private and gated copies of one adapter, and two tokens. */
export async function startHub(t: Test): Promise<FakeHub> {
  const hub = await FakeHub.start()
  t.teardown(() => hub.close())
  await hub.addRepo('acme/poet', ADAPTER)
  await hub.addRepo('acme/secret', ADAPTER, { private: true })
  await hub.addRepo('acme/gated', ADAPTER, { gated: 'manual' })
  hub.addToken(READER, { canRead: ['acme/secret', 'acme/gated'] })
  hub.addToken(STRANGER)
  return hub
}

/** Register the plugin as the loader would and return what it provided. */
export async function registerHub(
  options: Record<string, unknown>,
  env: Record<string, string> = {},
): Promise<{ source: AdapterSource; checker: AuthChecker; logs: string[] }> {
  const logs: string[] = []
  const provided = new Map<symbol, unknown>()
  // The process environment may hold real hub switches; each test states its own.
  const names = [...GLOBAL_TOKEN_SWITCHES, ...GLOBAL_TOKEN_VARIABLES]
  const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]))
  for (const name of names) {
    if (env[name] === undefined) delete process.env[name]
    else process.env[name] = env[name]
  }
  try {
    await plugin.register(
      {
        server: { modelPath: '/m', modelId: 'm', cacheDir: '/c', configDir: '/', limits: {} },
        logger: captureLogger(logs),
        provide: (token, impl) => void provided.set(token, impl),
        onClose: () => {},
      },
      plugin.options.parse(options),
    )
  } finally {
    for (const name of names) {
      if (saved[name] === undefined) delete process.env[name]
      else process.env[name] = saved[name]
    }
  }
  return {
    source: provided.get(AdapterSource) as AdapterSource,
    checker: provided.get(AuthChecker) as AuthChecker,
    logs,
  }
}

export function context(token?: string, signal = new AbortController().signal, lines: string[] = []): SourceContext {
  return { token, signal, logger: captureLogger(lines) }
}
