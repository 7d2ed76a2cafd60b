import type { AdapterRef, ResolvedAdapter } from './adapter.ts'
import type { Logger } from './logger.ts'

/** What a source may use while resolving or fetching for one request. */
export interface SourceContext {
  /** The caller's token for this adapter (from `api_token` or `Authorization: Bearer`), if any. Never log it. */
  readonly token?: string
  /** Aborted when the request is cancelled or the server closes; sources pass it to their HTTP clients. */
  readonly signal: AbortSignal
  readonly logger: Logger
}

/**
 * Where adapters come from. One instance per `adapter_source` code; third parties add sources by
 * registering another implementation under this token from a plugin.
 *
 * The core calls `resolve` for every request that names an adapter (cheap; may be cached by the
 * source for a short time), and `fetch` at most once per resolved revision (the cache deduplicates
 * and makes the download atomic).
 */
export interface AdapterSource {
  /** The `adapter_source` code this source answers to (`hub`, `local`, `s3`, `pbase`, …). Unique per server. */
  readonly name: string

  /**
   * Pin `ref.id` to an immutable revision and list its files.
   * Throws a `LoomError`: `adapter_id_invalid` for a malformed id, `adapter_not_found` when the
   * source has no such adapter, `adapter_source_unavailable` when the source cannot be reached.
   */
  resolve(ref: AdapterRef, ctx: SourceContext): Promise<ResolvedAdapter>

  /**
   * Write every file of `resolved.files` under `destDir` (an empty temporary directory the cache
   * renames into place once complete and verified). Not called when `resolved.localDir` is set.
   * Must honour `ctx.signal`; may throw on partial failure — the cache discards `destDir`.
   */
  fetch(resolved: ResolvedAdapter, destDir: string, ctx: SourceContext): Promise<void>

  /**
   * Optional: ids this source can offer without a network round trip (for example the adapter
   * directories under the local roots), listed by `GET /v1/models`. Sources backed by a remote
   * catalogue leave it out.
   */
  list?(): Promise<string[]>

  /** Release clients and sockets. Called once when the server closes. */
  close?(): Promise<void>
}

/** Injection token for `AdapterSource` (multi-provider: one per source code). */
export const AdapterSource: unique symbol = Symbol('AdapterSource')
