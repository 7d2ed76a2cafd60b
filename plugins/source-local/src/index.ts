import { resolve } from 'node:path'
import { AdapterSource, definePlugin, z } from '@loom/core'
import { LocalAdapterSource } from './local-source.ts'

/** Serves adapters from directories on the server (`adapter_source: local`). */
export default definePlugin({
  name: '@loom/source-local',
  provides: ['AdapterSource'],
  options: z.strictObject({
    /** Directories adapters may live under, relative to the config file. The first resolves relative ids. */
    roots: z.array(z.string().min(1)).min(1),
    /** The `adapter_source` code. */
    name: z.string().min(1).default('local'),
  }),
  register(ctx, options) {
    const roots = options.roots.map((root) => resolve(ctx.server.configDir, root))
    ctx.provide(AdapterSource, new LocalAdapterSource(options.name, roots))
  },
})
