/**
 * Tiny plugins written into each test's directory (`t.testdir`). They import '@loom/core' like a
 * real third-party plugin, which resolves through the workspace's node_modules because tap puts
 * test directories under the repository's `.tap/fixtures`. Each logs its lifecycle as `event`s.
 */
/** A directory tree for `t.testdir`: file name → contents, or a nested tree. */
export interface FixtureTree {
  readonly [name: string]: string | FixtureTree
}

export const FIXTURE_PLUGINS: FixtureTree = {
  'runtime.ts': `
import { definePlugin, StepRunner, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-runtime',
  provides: ['StepRunner'],
  options: z.strictObject({}).prefault({}),
  register(ctx) {
    ctx.provide(StepRunner, { fixture: 'runner' })
    ctx.logger.debug({ facts: ctx.server }, 'registered')
    ctx.onClose(() => ctx.logger.info({ event: 'close-hook:runtime' }))
  },
})
`,
  'backend.ts': `
import { Backend, definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-backend',
  provides: ['Backend'],
  options: z.strictObject({}).prefault({}),
  register(ctx) {
    ctx.provide(Backend, { fixture: 'backend' })
  },
})
`,
  'source.ts': `
import { AdapterSource, definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-source',
  provides: ['AdapterSource'],
  options: z.strictObject({ name: z.string().min(1), retries: z.number().int().min(0).default(2) }),
  register(ctx, options) {
    ctx.provide(AdapterSource, {
      name: options.name,
      async resolve() { throw new Error('unused') },
      async fetch() {},
      async close() { ctx.logger.info({ event: 'source-close:' + options.name }) },
    })
    ctx.onClose(async () => ctx.logger.info({ event: 'close-hook:' + options.name }))
  },
})
`,
  'checker.ts': `
import { AuthChecker, definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-checker',
  provides: ['AuthChecker'],
  options: z.strictObject({ source: z.string() }),
  register(ctx, options) {
    ctx.provide(AuthChecker, { source: options.source, async check() { return { allowed: true } } })
  },
})
`,
  'template.ts': `
import { definePlugin, TemplateEngine, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-template',
  provides: ['TemplateEngine'],
  options: z.unknown(),
  register(ctx) {
    ctx.provide(TemplateEngine, { compile: () => ({ render: () => 'from plugin' }) })
  },
})
`,
  'no-default.ts': `
import { definePlugin, StepRunner, z } from '@loom/core'
export const plugin = definePlugin({ name: 'x', provides: ['StepRunner'], options: z.unknown(), register() {} })
`,
  'bad-provides.ts': `
import { z } from '@loom/core'
export default { name: 'fixture-bad', provides: ['Database'], options: z.unknown(), register() {} }
`,
  'no-schema.ts': `
export default { name: 'fixture-no-schema', provides: ['AdapterSource'], options: { name: 'string' }, register() {} }
`,
  'throws.ts': `
import { definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-throws',
  provides: ['AdapterSource'],
  options: z.unknown(),
  register() {
    throw new Error('cannot open /var/lib/acme: permission denied')
  },
})
`,
  'undeclared.ts': `
import { AdapterSource, Backend, definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-undeclared',
  provides: ['AdapterSource'],
  options: z.unknown(),
  register(ctx) {
    ctx.provide(AdapterSource, { name: 'u', async resolve() { throw new Error('unused') }, async fetch() {} })
    ctx.provide(Backend, {})
  },
})
`,
  'lazy.ts': `
import { definePlugin, z } from '@loom/core'
export default definePlugin({ name: 'fixture-lazy', provides: ['AuthChecker'], options: z.unknown(), register() {} })
`,
  'foreign-token.ts': `
import { definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-foreign',
  provides: ['AdapterSource'],
  options: z.unknown(),
  register(ctx) {
    ctx.provide(Symbol('AdapterSource'), { name: 'lookalike' })
  },
})
`,
  'nameless-source.ts': `
import { AdapterSource, definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'fixture-nameless',
  provides: ['AdapterSource'],
  options: z.unknown(),
  register(ctx) {
    ctx.provide(AdapterSource, { async resolve() {}, async fetch() {} })
  },
})
`,
  'syntax-error.ts': `export default {{ oops`,
  'acme-plugin': {
    'package.json': JSON.stringify({ name: 'acme-plugin', type: 'module', main: './lib/entry.ts' }),
    lib: {
      'entry.ts': `
import { AdapterSource, definePlugin, z } from '@loom/core'
export default definePlugin({
  name: 'acme-plugin',
  provides: ['AdapterSource'],
  options: z.strictObject({}).prefault({}),
  register(ctx) {
    ctx.provide(AdapterSource, { name: 'acme', async resolve() { throw new Error('unused') }, async fetch() {} })
  },
})
`,
    },
  },
  'empty-dir': {},
}
