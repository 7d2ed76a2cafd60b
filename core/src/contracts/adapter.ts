/**
 * Shared adapter vocabulary used by several contracts: how a request names an adapter, how a
 * source pins it, and what the runtime receives once its files are on disk.
 */

/** An adapter as a request names it, before any source has looked at it. */
export interface AdapterRef {
  /** The `adapter_source` code the request used (or the server default), e.g. `hub`, `local`, `s3`, `pbase`. */
  readonly source: string
  /** The source-specific id: `owner/name[@rev]`, a directory, `s3://bucket/path`, `repo/version`. */
  readonly id: string
}

/** One file a source promises to deliver, with whatever integrity facts the source knows. */
export interface AdapterFileInfo {
  /** Path relative to the adapter root, with `/` separators and no `..` segments. */
  readonly path: string
  /** Size in bytes when the source reports it; the cache refuses a download of another size. */
  readonly size?: number
  /** Lower-case hex SHA-256 when the source reports it (the hub's LFS oid); verified after download. */
  readonly sha256?: string
}

/**
 * An adapter pinned to one immutable revision. Two requests that resolve to the same
 * `(source, id, revision)` share one cache entry and one download.
 */
export interface ResolvedAdapter extends AdapterRef {
  /** Immutable identity of the content: a commit sha, a version number, an ETag, or a content hash for local dirs. */
  readonly revision: string
  /** The files to fetch. Sources list only what the runtime needs (configs, weights, tokenizer files). */
  readonly files: readonly AdapterFileInfo[]
  /**
   * Set by sources whose files already sit on this machine (the local source): the cache uses the
   * directory in place instead of copying it.
   */
  readonly localDir?: string
}

/** The kinds of adapter Loom applies on top of the base model. */
export type AdapterKind = 'lora' | 'medusa'

/** An adapter whose files are complete on local disk, ready to be validated and loaded. */
export interface LocalAdapter {
  readonly resolved: ResolvedAdapter
  /** Directory holding `adapter_config.json` (LoRA) or `config.json` (Medusa) and the weights. */
  readonly dir: string
  readonly kind: AdapterKind
}

/**
 * The runtime's receipt for a loaded adapter. Requests carry it to the backend; the backend maps
 * it to its own slot. It stays valid until `Backend.unloadAdapter` is called with it.
 */
export interface AdapterHandle {
  /** Stable key of the adapter's content: `${source}:${id}@${revision}` (or a merge key). */
  readonly key: string
  /**
   * The adapter's public name: the id its source resolved it to (what `/v1/models` lists and a
   * client sends as `model`), or the merge key of a merged adapter. Reported, never parsed:
   * `vllm:lora_requests_info` names running and waiting adapters by it.
   */
  readonly id: string
  readonly kind: AdapterKind
  /** LoRA rank (max over modules) or Medusa head count. */
  readonly size: number
}
