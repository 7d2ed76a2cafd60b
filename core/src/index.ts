/**
 * `@loom/core`'s public surface. Plugins import only from here: the contracts and their
 * injection tokens, the error registry, and `z` (the schema library plugin options are written in,
 * re-exported so every plugin validates with the same instance).
 */
import 'reflect-metadata'

export * from './contracts/index.ts'
export * from './errors/index.ts'
export * from './sources/index.ts' // the source kit for AdapterSource plugins
export { z } from 'zod'
