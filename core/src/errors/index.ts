export * from './registry.ts'
export * from './loom-error.ts'
