export * from './create-metrics.ts'
