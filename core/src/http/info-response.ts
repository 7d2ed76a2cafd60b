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
}
