export * from './server-container.ts'
export * from './tokens.ts'
