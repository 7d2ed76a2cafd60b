import {
  withRetry,
  type AdapterRef,
  type AuthChecker,
  type AuthDecision,
  type Logger,
  type RetryPolicy,
} from '@loom/core'
import type { HubClient } from './hub-client.ts'
import { parseHubId } from './hub-id.ts'
import { HubRequestError, isTransientHubError } from './hub-request-error.ts'

export interface HubAuthCheckerOptions {
  /** The `adapter_source` code guarded. */
  readonly source: string
  readonly client: HubClient
  readonly retry: RetryPolicy
  /** The caller's token, or the server's when the fallback is on. */
  readonly tokenFor: (token: string | undefined) => string | undefined
  /** True when requests without a token fall back to the server's (changes the wording only). */
  readonly globalFallback: boolean
  readonly logger: Logger
}

const ALLOWED: AuthDecision = { allowed: true }

/**
 * Asks the hub, on every call and without remembering answers, whether a token may read a repo:
 * model info at the requested revision with that token (one request). A gated repo's metadata is
 * public, so for those a second request (HEAD of a file, without following the redirect) checks
 * the caller's access to the files.
 *
 * The hub's answers map as: 200 → allowed; 401 → `missing` without a token, `invalid` with one
 * (unknown, expired or revoked); 403 (gated, disabled) → `forbidden`; 404 `RepoNotFound` to a
 * valid token → `forbidden` (the hub does not say whether the repo is missing or private to
 * others); 404 for a revision → allowed (resolve reports `adapter_not_found`). Malformed ids are
 * allowed here so resolve reports `adapter_id_invalid`. It throws only when the hub cannot be
 * reached or answers something else (5xx after retries, timeouts), which the core turns into 503.
 */
export class HubAuthChecker implements AuthChecker {
  readonly source: string
  readonly #options: HubAuthCheckerOptions

  constructor(options: HubAuthCheckerOptions) {
    this.source = options.source
    this.#options = options
  }

  async check(ref: AdapterRef, token: string | undefined, signal: AbortSignal): Promise<AuthDecision> {
    let repo: string
    let revision: string | undefined
    try {
      ;({ repo, revision } = parseHubId(ref.id, this.source))
    } catch {
      return ALLOWED
    }
    const { client, retry, logger } = this.#options
    const used = this.#options.tokenFor(token)
    const retrying = {
      ...retry,
      signal,
      isRetryable: isTransientHubError,
      onRetry: (err: unknown, n: number, delayMs: number) =>
        logger.warn(
          { source: this.source, repo, retry: n, delayMs, reason: (err as Error).message },
          'retrying authorization check',
        ),
    }
    try {
      const facts = await withRetry(() => client.modelInfo(repo, revision, used, signal), retrying)
      if (facts.gated !== false) {
        // Gated repos show their metadata to everyone; the files are what needs access.
        await withRetry(() => client.probeFiles(repo, facts.sha, 'adapter_config.json', used, signal), retrying)
      }
      return ALLOWED
    } catch (err) {
      if (!(err instanceof HubRequestError) || err.kind !== 'http') throw err
      const decision = this.#decide(repo, used, token !== undefined, err)
      if (decision === null) throw err
      if (!decision.allowed)
        logger.debug({ source: this.source, repo, status: err.status, reason: decision.reason }, 'hub refused access')
      return decision
    }
  }

  #decide(repo: string, used: string | undefined, ownToken: boolean, err: HubRequestError): AuthDecision | null {
    const whose = ownToken || !this.#options.globalFallback ? 'the token' : "the server's token (global fallback)"
    const revisionMissing = err.errorCode === 'RevisionNotFound' || err.errorCode === 'EntryNotFound'
    if (used === undefined && !revisionMissing && (err.status === 401 || err.status === 403 || err.status === 404)) {
      return {
        allowed: false,
        reason: 'missing',
        message: `the hub has no public repository \`${repo}\`: it is private, gated or missing; send a token that can read it`,
      }
    }
    switch (err.status) {
      case 401:
        if (err.errorCode === 'GatedRepo' || err.errorCode === 'RepoNotFound') return this.#noAccess(repo, whose, err)
        return {
          allowed: false,
          reason: 'invalid',
          message: `the hub does not accept ${whose} (unknown, expired or revoked)`,
        }
      case 403:
      case 404:
        if (revisionMissing) return ALLOWED
        return this.#noAccess(repo, whose, err)
      default:
        return null
    }
  }

  #noAccess(repo: string, whose: string, err: HubRequestError): AuthDecision {
    const message =
      err.errorCode === 'GatedRepo'
        ? `\`${repo}\` is gated and ${whose} has not been granted access`
        : err.status === 403
          ? `the hub refused ${whose} access to \`${repo}\``
          : `the hub has no repository \`${repo}\` that ${whose} can read (it is missing, or private and not shared with it)`
    return { allowed: false, reason: 'forbidden', message }
  }
}
