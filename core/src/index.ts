/**
 * `@loom/core`'s public surface. Plugins import only from here: the contracts and their
 * injection tokens, the error registry, and `z` (the schema library plugin options are written in,
 * re-exported so every plugin validates with the same instance).
 */
import 'reflect-metadata'

export * from './contracts/index.ts'
export * from './errors/index.ts'
export * from './sources/index.ts' // the source kit for AdapterSource plugins
// For request-level Backend plugins, which read adapters themselves (the BatchingEngine does it for
// step runners): the same PEFT / Medusa readers and checks, the default Medusa tree, and the
// single-consumer event stream the engine hands back from `submit`.
export { readLoraAdapter } from './adapters/read-lora.ts'
export { readMedusaAdapter } from './adapters/read-medusa.ts'
export { DEFAULT_MEDUSA_CHOICES } from './engine/medusa/medusa-tree.ts'
export { EventChannel } from './engine/event-channel.ts'
// The close/destroy lifecycle every Backend shares.
export { BackendLifecycle } from './lifecycle/backend-lifecycle.ts'
export { z } from 'zod'
