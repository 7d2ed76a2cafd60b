import type { AdapterSource, Logger } from '../contracts/index.ts'
import type { PluginSet } from './plugin-set.ts'

/**
 * Undo what plugins set up: `onClose` hooks in reverse registration order, then `close()` on every
 * AdapterSource (also in reverse). A failing step is logged and the rest still run, so one broken
 * plugin cannot leak another's sockets. Used by the container's `dispose()` and by the loader when
 * startup fails half-way.
 */
export async function releasePlugins(set: PluginSet, logger: Logger): Promise<void> {
  for (const hook of [...set.closeHooks].reverse()) {
    try {
      await hook.fn()
    } catch (err) {
      logger.error({ err, plugin: hook.plugin.name }, 'plugin onClose hook failed')
    }
  }
  for (const provision of [...set.provisions].reverse()) {
    if (provision.contract !== 'AdapterSource') continue
    const source = provision.implementation as AdapterSource
    if (typeof source.close !== 'function') continue
    try {
      await source.close()
    } catch (err) {
      logger.error({ err, plugin: provision.plugin.name, source: source.name }, 'adapter source close failed')
    }
  }
}
