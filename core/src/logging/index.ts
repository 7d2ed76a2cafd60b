export * from './create-logger.ts'
export * from './redact-secrets.ts'
export * from './redact-object.ts'
export * from './log-serializers.ts'
