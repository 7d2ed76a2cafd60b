import type { AdapterRef, ResolvedAdapter } from './adapter.ts'
import type { Logger } from './logger.ts'

/** What a source may use while resolving or fetching for one request. */
export interface SourceContext {
  /**
   * The caller's token for this adapter, if any: `api_token`, or the `Authorization: Bearer` value
   * when the adapter could not be read without it (the core tries a header token, often an SDK's
   * api key, only after an anonymous check failed). Never log it.
   */
  readonly token?: string
  /**
   * In `resolve`: aborted when the request is cancelled or the server closes. In `fetch`: the
   * shared download's signal (several requests may wait on one download), aborted only when the
   * server closes or after 30 minutes. Sources pass it to their HTTP clients.
   */
  readonly signal: AbortSignal
  readonly logger: Logger
}

/**
 * Where adapters come from. One instance per `adapter_source` code; third parties add sources by
 * registering another implementation under this token from a plugin.
 *
 * The core calls `resolve` when a request names an adapter and keeps the answer for
 * `adapters.resolve_ttl_s` (30 s by default; every time for sources that set `localDir`), so a
 * source needs no cache of its own and a new revision shows after that TTL. `fetch` runs once per
 * resolved revision, retried into a fresh `destDir` up to `adapters.download_attempts` times when
 * it fails transiently (the cache deduplicates and makes the download atomic).
 *
 * What a throw becomes: a `LoomError` reaches the client as it is; any other error from `fetch`
 * becomes `adapter_download_failed` (502) and from `resolve` an `internal_error` (500), and its
 * message may reach the client and the log, so never put a secret or a private path in it. Once
 * the request was cancelled or the server is closing, whatever was thrown becomes
 * `request_cancelled` or `server_closing`.
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
   * directories under the local roots), listed by `GET /v1/models` to every caller, authorized
   * or not: list only ids that may be public. Sources backed by a remote catalogue leave it out.
   */
  list?(): Promise<string[]>

  /** Release clients and sockets. Called once when the server closes. */
  close?(): Promise<void>
}

/** Injection token for `AdapterSource` (multi-provider: one per source code). */
export const AdapterSource: unique symbol = Symbol('AdapterSource')
