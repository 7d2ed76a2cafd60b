import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { parseDocument } from 'yaml'
import { LoomError, describeValue } from '../errors/index.ts'
import { describeFirstIssue } from './describe-issue.ts'
import { substituteEnv, type Env } from './env-substitution.ts'
import { ConfigSchema } from './schema.ts'
import { maskCredentials } from './shown-value.ts'
import { deepFreeze, type ValidConfig } from './valid-config.ts'

export interface LoadConfigOptions {
  /** Variables for `${VAR}` substitution; defaults to `process.env`. */
  readonly env?: Env
  /** Directory file names in messages are shown relative to; defaults to `process.cwd()`. */
  readonly cwd?: string
}

/**
 * Read, substitute, validate and normalize a configuration file. Throws a `LoomError` naming the
 * file and the key: `config_unreadable`, `config_yaml_invalid` (with line and column),
 * `config_env_missing` or `config_invalid`.
 */
export async function loadConfig(file: string, options: LoadConfigOptions = {}): Promise<ValidConfig> {
  const cwd = options.cwd ?? process.cwd()
  const absolute = path.resolve(cwd, file)
  let text: string
  try {
    text = await readFile(absolute, 'utf8')
  } catch (err) {
    throw new LoomError(
      'config_unreadable',
      { file: displayPath(absolute, cwd), detail: describeFsError(err) },
      { cause: err },
    )
  }
  return parseConfig(text, absolute, options)
}

/**
 * Validate configuration text as if it were read from `file` (an absolute path: relative paths
 * inside resolve against its directory). `loadConfig` without the disk read.
 */
export function parseConfig(text: string, file: string, options: LoadConfigOptions = {}): ValidConfig {
  const cwd = options.cwd ?? process.cwd()
  const shown = displayPath(file, cwd)
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true })
  const yamlError = doc.errors[0]
  if (yamlError !== undefined) {
    const position = yamlError.linePos?.[0]
    // yaml's own message ends with "at line L, column C:" and a code excerpt; keep its first clause.
    // Some reasons quote the source (`Block scalar header includes extra characters: …`): masked.
    const reason = maskCredentials(yamlError.message.split(' at line ')[0]?.trim() ?? yamlError.message)
    let detail = position === undefined ? reason : `line ${position.line}, column ${position.col}: ${reason}`
    // `{` and `}` are YAML flow indicators: `port: ${PORT}` inside `{ … }` or `[ … ]` breaks parsing.
    const line = position === undefined ? undefined : text.split('\n')[position.line - 1]
    if (line?.includes('${') === true) detail += ' (quote values that use ${...} inside `{ }` or `[ ]`)'
    throw new LoomError('config_yaml_invalid', { file: shown, detail }, { cause: yamlError })
  }
  const substituted = substituteEnv(doc, options.env ?? process.env, shown)
  const raw: unknown = doc.toJS()
  if (raw === null || raw === undefined) {
    throw new LoomError('config_invalid', {
      file: shown,
      path: '(top level)',
      expected: 'must be a mapping with at least `model:` and `plugins:`',
      received: 'an empty file',
    })
  }
  const parsed = ConfigSchema.safeParse(raw)
  if (!parsed.success) {
    const issue = describeFirstIssue(parsed.error, { input: raw, schema: ConfigSchema, substituted })
    throw new LoomError('config_invalid', { file: shown, ...issue }, { param: issue.path })
  }
  const dir = path.dirname(file)
  const config = {
    ...parsed.data,
    model: { ...parsed.data.model, path: path.resolve(dir, parsed.data.model.path) },
    adapters: { ...parsed.data.adapters, cache_dir: path.resolve(dir, parsed.data.adapters.cache_dir) },
    file,
    dir,
    fromEnv: substituted,
  }
  // The one place a ValidConfig is minted.
  return deepFreeze(config) as unknown as ValidConfig
}

/** A path as the user will recognize it: relative to the working directory when inside it. */
export function displayPath(file: string, cwd: string): string {
  const relative = path.relative(cwd, file)
  return relative === '' || relative.startsWith('..') || path.isAbsolute(relative) ? file : relative
}

function describeFsError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | null)?.code
  if (code === 'ENOENT') return 'no such file'
  if (code === 'EACCES') return 'permission denied'
  if (code === 'EISDIR') return 'it is a directory'
  return err instanceof Error ? err.message : describeValue(err)
}
