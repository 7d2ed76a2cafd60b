import { createHash } from 'node:crypto'
import type { AdapterRef } from '../contracts/adapter.ts'
import type { AuthChecker, AuthDecision } from '../contracts/auth-checker.ts'
import { LoomError, isLoomError } from '../errors/index.ts'
import type { Metrics } from '../metrics/index.ts'
import { lifetimeController, scopedSignal } from './scoped-signal.ts'

/** How long a shared check may run before every caller gets `auth_unavailable`. */
const CHECK_TIMEOUT_MS = 30_000

/**
 * Most `allowed` decisions kept for `auth_ttl_s` (one per source, adapter and token): beyond it the
 * oldest goes first, and expired ones go as new ones come, so many callers' tokens cannot grow
 * the map without end. A dropped decision only costs one more check.
 */
export const MAX_ALLOWED_DECISIONS = 10_000

export interface AuthGateOptions {
  readonly checkers: ReadonlyMap<string, AuthChecker>
  /** Seconds an `allowed` decision may be reused for the same (source, id, token); 0: never. */
  readonly ttlSeconds: number
  readonly metrics?: Metrics
}

/**
 * Runs the `AuthChecker` of an adapter's source for every request. Identical checks that are in
 * flight at the same moment share one call to the source; a finished decision is reused only
 * when `auth_ttl_s` allows it, and only an `allowed` one (a refusal is never cached, so a fixed
 * token works at once). Tokens are kept only as SHA-256 digests.
 */
export class AuthGate {
  readonly #options: AuthGateOptions
  readonly #inflight = new Map<string, Promise<AuthDecision>>()
  readonly #allowedUntil = new Map<string, number>()
  /** Aborted by `close()`: checks in flight stop and answer `server_closing`. */
  readonly #closed = lifetimeController()

  constructor(options: AuthGateOptions) {
    this.#options = options
  }

  /** How many `allowed` decisions are kept for reuse (at most `MAX_ALLOWED_DECISIONS`). */
  get cachedDecisions(): number {
    return this.#allowedUntil.size
  }

  /** Server shutdown: abort checks in flight (a slow source must not hold the drain). */
  close(): void {
    this.#closed.abort(new LoomError('server_closing'))
  }

  /**
   * Resolves with the token the source may be sent for `ref` when the caller may read it; rejects
   * with `auth_*` otherwise. A `fromHeader` token (an `Authorization: Bearer` value, which may be
   * an OpenAI SDK's api key or a gateway's credential rather than a hub token) is sent to the
   * source only when the adapter cannot be read without it: anonymous access is tried first and,
   * when it is allowed, the result is `undefined`, so the key never leaves the server for a
   * public adapter and an unrelated key cannot make a public adapter fail.
   */
  async authorize(
    ref: AdapterRef,
    token: string | undefined,
    options: { fromHeader?: boolean } = {},
  ): Promise<string | undefined> {
    if (options.fromHeader && token !== undefined && this.#options.checkers.has(ref.source)) {
      const anonymous = await this.#check(ref, undefined).then(
        () => true,
        () => false,
      )
      if (anonymous) return undefined
    }
    await this.#check(ref, token)
    return token
  }

  async #check(ref: AdapterRef, token: string | undefined): Promise<void> {
    const checker = this.#options.checkers.get(ref.source)
    if (!checker) return
    const key = `${ref.source}\0${ref.id}\0${createHash('sha256')
      .update(token ?? '')
      .digest('hex')}`
    const until = this.#allowedUntil.get(key)
    if (until !== undefined && until > Date.now()) {
      this.#options.metrics?.authChecked(ref.source, 'cached')
      return
    }
    let pending = this.#inflight.get(key)
    if (!pending) {
      if (this.#closed.signal.aborted) throw new LoomError('server_closing')
      // Released when the check ends: nothing per check stays on the gate's close signal.
      const scoped = scopedSignal(AbortSignal.timeout(CHECK_TIMEOUT_MS), this.#closed.signal)
      pending = checker.check(ref, token, scoped.signal)
      this.#inflight.set(key, pending)
      const done = () => {
        scoped.release()
        this.#inflight.delete(key)
      }
      pending.then(done, done)
    }
    let decision: AuthDecision
    try {
      decision = await pending
    } catch (err) {
      if (this.#closed.signal.aborted) throw new LoomError('server_closing')
      this.#options.metrics?.authChecked(ref.source, 'error')
      if (isLoomError(err)) throw err
      throw new LoomError('auth_unavailable', { id: ref.id, detail: (err as Error).message }, { cause: err })
    }
    this.#options.metrics?.authChecked(ref.source, decision.allowed ? 'allowed' : 'denied')
    if (decision.allowed) {
      if (this.#options.ttlSeconds > 0) this.#remember(key)
      return
    }
    this.#allowedUntil.delete(key)
    const params = { id: ref.id, detail: decision.message }
    if (decision.reason === 'missing') throw new LoomError('auth_missing', params)
    if (decision.reason === 'invalid') throw new LoomError('auth_invalid', params)
    throw new LoomError('auth_forbidden', params)
  }

  /**
   * Keep an `allowed` decision for the TTL. Every entry has the same TTL and is re-inserted when
   * renewed, so the map's order is expiry order: expired entries are dropped from its front, and
   * the oldest beyond `MAX_ALLOWED_DECISIONS`.
   */
  #remember(key: string): void {
    const now = Date.now()
    this.#allowedUntil.delete(key)
    this.#allowedUntil.set(key, now + this.#options.ttlSeconds * 1000)
    for (const [oldest, until] of this.#allowedUntil) {
      if (until > now && this.#allowedUntil.size <= MAX_ALLOWED_DECISIONS) break
      this.#allowedUntil.delete(oldest)
    }
  }
}
