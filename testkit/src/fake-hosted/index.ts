export { FakeHostedServer, type HostedRequest } from './fake-hosted-server.ts'
export type { HostedStatus } from './repository.ts'
