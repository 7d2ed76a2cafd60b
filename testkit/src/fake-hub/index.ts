/** A loopback server speaking the Hugging Face hub's protocol, for tests of hub adapter sources. */
export { FakeHub } from './fake-hub.ts'
export type {
  FakeHubRepoOptions,
  FakeHubTokenOptions,
  FileMatch,
  HubRequestRecord,
  RepoContent,
  RequestMatch,
} from './fake-hub.ts'
export { INVALID_CREDENTIALS, type HubErrorCode } from './hub-error.ts'
