export * from './create-metrics.ts'
export * from './gateway-metrics.ts'
