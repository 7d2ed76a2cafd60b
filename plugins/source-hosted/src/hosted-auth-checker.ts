import type { AdapterRef, AuthChecker, AuthDecision } from '@loom/core'
import { LoomError } from '@loom/core'
import { HostedUnavailableError, type HostedClient } from './hosted-client.ts'
import { parseHostedId } from './hosted-id.ts'

const MESSAGES = {
  missing: 'the hosted repository needs a token for this adapter',
  invalid: 'the hosted repository does not accept the token (unknown or revoked)',
  forbidden: 'the hosted repository denies the token access to this adapter',
} as const

/**
 * Asks the hosted repository, on every call, whether `token` may read the adapter: the same
 * metadata request as resolve(), so a revoked token or a withdrawn grant is refused on the very
 * next request even when the adapter is cached and loaded. Nothing is cached between calls.
 */
export class HostedAuthChecker implements AuthChecker {
  readonly source: string
  readonly #client: HostedClient
  readonly #fallbackToken: string | undefined

  constructor(source: string, client: HostedClient, fallbackToken: string | undefined) {
    this.source = source
    this.#client = client
    this.#fallbackToken = fallbackToken
  }

  async check(ref: AdapterRef, token: string | undefined, signal: AbortSignal): Promise<AuthDecision> {
    const id = parseHostedId(ref.id, this.source)
    let outcome
    try {
      outcome = await this.#client.metadata(id, token ?? this.#fallbackToken, signal)
    } catch (err) {
      // The core turns a throw into 503 auth_unavailable, never into "allowed".
      if (err instanceof HostedUnavailableError) throw new Error(`the hosted repository did not answer: ${err.message}`)
      throw err
    }
    if (outcome.kind === 'ok') return { allowed: true }
    if (outcome.kind === 'not_found') throw new LoomError('adapter_not_found', { id: ref.id, source: this.source })
    return { allowed: false, reason: outcome.reason, message: MESSAGES[outcome.reason] }
  }
}
