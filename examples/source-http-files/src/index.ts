import { ADAPTER_FILE_NAMES, AdapterSource, definePlugin, z } from '@loom/core'
import { isSafeRelativePath } from './adapter-path.ts'
import { HttpFilesSource } from './http-files-source.ts'

/** The `options:` block of this plugin. Documented in README.md. */
export const HttpFilesOptions = z.strictObject({
  /** Root URL; adapter `acme/x` lives at `<base_url>/acme/x/`. */
  base_url: z.url({ protocol: /^https?$/ }),
  /** The `adapter_source` code requests use. */
  name: z.string().min(1).default('http-files'),
  /** File names to look for in each adapter folder; default: every file the runtime may read (the core's list). */
  files: z
    .array(z.string().refine(isSafeRelativePath, 'must be a relative path without `..`'))
    .min(1)
    .default([...ADAPTER_FILE_NAMES]),
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
