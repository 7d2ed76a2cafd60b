import type { AdapterRef } from './adapter.ts'

/** The outcome of one authorization check. */
export type AuthDecision =
  | { readonly allowed: true }
  | {
      readonly allowed: false
      /** `missing`: no token but one is needed (401); `invalid`: token unknown or revoked (401); `forbidden`: valid token without access (403). */
      readonly reason: 'missing' | 'invalid' | 'forbidden'
      /**
       * Safe for clients: the reason only, never the token. The core puts it inside a sentence
       * that already names the adapter ("The token may not read adapter `x`: <message>").
       */
      readonly message: string
    }

/**
 * Decides whether a caller may read an adapter. Runs on **every** request that names an adapter of
 * its source — cached adapter or not — started when the request arrives and awaited before the
 * request joins a batch, so a revoked token is refused at once.
 *
 * Sources without access control (local, s3) have no checker; the core treats them as allow-all.
 *
 * A token from the `Authorization: Bearer` header (often an OpenAI SDK's api key or a gateway's
 * credential, not an adapter token) is checked in two steps: first `check(ref, undefined)`, and
 * only when that refuses, `check(ref, token)`. A token sent as `api_token` is checked once, as
 * sent. The signal ends the check at the server's timeout (30 s) or shutdown, not when the client
 * leaves (identical checks in flight are shared between requests).
 */
export interface AuthChecker {
  /** The `adapter_source` code this checker guards; at most one checker per source. */
  readonly source: string

  /**
   * Check `token` (possibly undefined) against `ref`. Resolves to a decision; throws only when the
   * check itself could not be made (the core answers 503 `auth_unavailable`, never "allowed").
   */
  check(ref: AdapterRef, token: string | undefined, signal: AbortSignal): Promise<AuthDecision>
}

/** Injection token for `AuthChecker` (multi-provider: one per guarded source). */
export const AuthChecker: unique symbol = Symbol('AuthChecker')
