import type { ServerFacts } from '../contracts/index.ts'
import type { ValidConfig } from './valid-config.ts'

/** The read-only facts a plugin's `register` may use, taken from the validated configuration. */
export function serverFacts(config: ValidConfig): ServerFacts {
  const limits: Record<string, number> = {}
  for (const [key, value] of Object.entries(config.limits)) if (typeof value === 'number') limits[key] = value
  return Object.freeze({
    modelPath: config.model.path,
    modelId: config.model.id,
    cacheDir: config.adapters.cache_dir,
    configDir: config.dir,
    limits: Object.freeze(limits),
  })
}
