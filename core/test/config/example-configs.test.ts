import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { loadConfig } from '../../src/config/index.ts'
import { createServerContainer } from '../../src/container/index.ts'
import { createLogger } from '../../src/logging/index.ts'

const configDir = fileURLToPath(new URL('../../../config/', import.meta.url))

/** Every shipped configuration parses, and its plugins load with their options, so the docs cannot rot. */
t.test('shipped configurations load with all their plugins', async (t) => {
  const files = [
    join(configDir, 'default.yaml'),
    ...(await readdir(join(configDir, 'examples'))).map((f) => join(configDir, 'examples', f)),
  ]
  const logger = createLogger({ level: 'silent', destination: new Writable({ write: (_c, _e, done) => done() }) })
  for (const file of files) {
    const config = await loadConfig(file, { env: {} })
    const trtllm = config.plugins.some((p) => p.use === '@loom/backend-trtllm')
    const loading = createServerContainer(config, logger)
    if (trtllm) {
      // Where the TensorRT-LLM addon was built against its fake (CI), startup refuses, naming the fix.
      const refusal = await loading.then(
        async (container) => void (await container.dispose()),
        (err: unknown) => err as Error,
      )
      if (refusal) {
        t.match(refusal.message, /built against the fake executor.*TRTLLM_ROOT.*"Building the native addon"/, file)
        continue
      }
    }
    const container = trtllm ? await createServerContainer(config, logger) : await loading
    t.ok(container.adapterSources().size >= 1, `${file}: sources ${[...container.adapterSources().keys()]}`)
    t.equal(container.backendOrRunner().kind, trtllm ? 'backend' : 'step-runner')
    await container.dispose()
  }
})
