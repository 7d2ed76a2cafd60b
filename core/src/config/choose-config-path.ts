import path from 'node:path'
import { LoomError } from '../errors/index.ts'
import type { Env } from './env-substitution.ts'

/** The configuration used when neither `--config` nor `LOOM_CONFIG` names one (runs on CPU). */
export const DEFAULT_CONFIG_PATH = 'config/default.yaml'

/**
 * Which configuration file the CLI loads: `--config PATH` (or `--config=PATH`; the last one given)
 * wins over the `LOOM_CONFIG` environment variable, which wins over `config/default.yaml`. Returns
 * an absolute path resolved against `cwd`.
 */
export function chooseConfigPath(argv: readonly string[], env: Env, cwd: string): string {
  // The last `--config` wins, as with most CLIs: `npm start -- --config other.yaml` appends its
  // own after the script's `--config config/default.yaml`.
  for (let i = argv.length - 1; i >= 0; i--) {
    const arg = argv[i]!
    if (arg === '--config') {
      const value = argv[i + 1]
      if (value === undefined || value === '' || value.startsWith('--')) {
        throw new LoomError('config_unreadable', { file: '--config', detail: 'the option needs a file path' })
      }
      return path.resolve(cwd, value)
    }
    if (arg.startsWith('--config=')) {
      const value = arg.slice('--config='.length)
      if (value === '') {
        throw new LoomError('config_unreadable', { file: '--config', detail: 'the option needs a file path' })
      }
      return path.resolve(cwd, value)
    }
  }
  const fromEnv = env.LOOM_CONFIG
  if (fromEnv !== undefined && fromEnv !== '') return path.resolve(cwd, fromEnv)
  return path.resolve(cwd, DEFAULT_CONFIG_PATH)
}
