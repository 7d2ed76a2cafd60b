import { AdapterSource, definePlugin, z } from '@loom/core'
import { isSafeRelativePath } from './adapter-path.ts'
import { HttpFilesSource } from './http-files-source.ts'

/** Files probed when `files` is not set: what LoRA and Medusa adapters ship, and optional tokenizer files. */
export const DEFAULT_FILES = [
  'adapter_config.json',
  'adapter_model.safetensors',
  'adapter_model.bin',
  'config.json',
  'medusa_lm_head.safetensors',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
] as const

/** The `options:` block of this plugin. Documented in README.md. */
export const HttpFilesOptions = z.strictObject({
  /** Root URL; adapter `acme/x` lives at `<base_url>/acme/x/`. */
  base_url: z.url({ protocol: /^https?$/ }),
  /** The `adapter_source` code requests use. */
  name: z.string().min(1).default('http-files'),
  /** File names to look for in each adapter folder. */
  files: z
    .array(z.string().refine(isSafeRelativePath, 'must be a relative path without `..`'))
    .min(1)
    .default([...DEFAULT_FILES]),
  /** Extra request headers, e.g. `Authorization: "Bearer ${FILES_TOKEN}"`. Never logged. */
  headers: z.record(z.string(), z.string()).default({}),
  /** Time limit for resolving one adapter, in milliseconds. */
  timeout_ms: z.number().int().positive().default(10_000),
})

/** Serves adapters from a plain HTTP file server (`adapter_source: http-files`). */
export default definePlugin({
  name: '@loom-example/source-http-files',
  provides: ['AdapterSource'],
  options: HttpFilesOptions,
  register(ctx, options) {
    const baseUrl = new URL(options.base_url.endsWith('/') ? options.base_url : `${options.base_url}/`)
    ctx.provide(
      AdapterSource,
      new HttpFilesSource({
        name: options.name,
        baseUrl,
        files: options.files,
        headers: options.headers,
        timeoutMs: options.timeout_ms,
      }),
    )
    ctx.logger.info({ source: options.name, host: baseUrl.host }, 'http-files adapter source ready')
  },
})
