import { AuthChecker, definePlugin, z } from '@loom/core'

/**
 * Test plugin: an AuthChecker for the `local` source that admits exactly one token, so the v1
 * tests can see the SDK's AuthenticationError without a hub.
 */
export default definePlugin({
  name: 'test-local-auth',
  provides: ['AuthChecker'],
  options: z.strictObject({ token: z.string(), protect: z.string() }),
  register(ctx, options) {
    ctx.provide(AuthChecker, {
      source: 'local',
      async check(ref: { id: string }, token: string | undefined) {
        if (ref.id !== options.protect) return { allowed: true } as const
        if (token === undefined) return { allowed: false, reason: 'missing', message: 'no token' } as const
        if (token !== options.token) return { allowed: false, reason: 'invalid', message: 'unknown token' } as const
        return { allowed: true } as const
      },
    })
  },
})
