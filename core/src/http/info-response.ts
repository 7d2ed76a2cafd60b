/**
 * `GET /info`: LoRAX's `Info` fields that apply to Loom, plus what Loom adds (backend, adapter
 * sources). Built by the server from the validated config and the backend's capabilities.
 */
export interface InfoResponse {
  readonly model_id: string
  /** Revision of the model weights, when known. */
  readonly model_sha?: string | null
  /** `float32`, `float16`, `bfloat16`. */
  readonly model_dtype: string
  /** `cpu`, `cuda`. */
  readonly model_device_type: string
  readonly model_pipeline_tag?: string | null
  /** The backend's name (`cuda-native:cpu`, `trtllm`). */
  readonly backend: string
  readonly max_input_length: number
  readonly max_total_tokens: number
  readonly max_batch_size: number
  readonly max_concurrent_requests: number
  readonly max_stop_sequences: number
  readonly max_batch_prefill_tokens: number
  readonly max_best_of?: number
  /** Loom's version. */
  readonly version: string
  /** Git commit Loom was built from, when known. */
  readonly sha?: string | null
  /** Names of the adapter sources this server can load from (`hub`, `local`, `s3`, `pbase`). */
  readonly adapter_sources: readonly string[]
  /** The source used when a request names an adapter without `adapter_source`. */
  readonly default_adapter_source: string
  /**
   * The default Medusa heads (`speculation.medusa_adapter`), null when the server does not
   * speculate. Listed here and not in `/v1/models`: they speed decoding up and never change the
   * text, so they are not a model a client could choose. The server always sets it.
   */
  readonly speculator?: InfoSpeculator | null
}

/** The speculative-decoding heads a server runs every request with (`/info`'s `speculator`). */
export interface InfoSpeculator {
  readonly kind: 'medusa'
  /** Its id as configured, and the source it was loaded from (`adapter_source`). */
  readonly adapter_id: string
  readonly adapter_source: string
  /** How many heads: each proposes one more token per step. */
  readonly heads: number
}
