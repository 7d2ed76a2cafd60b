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
    const container = await createServerContainer(config, logger)
    t.ok(container.adapterSources().size >= 1, `${file}: sources ${[...container.adapterSources().keys()]}`)
    t.equal(container.backendOrRunner().kind, 'step-runner')
    await container.dispose()
  }
})
