/*
 * loom-trtllm.h: Loom's own C ABI over a request-level LLM executor.
 *
 * Two implementations sit behind this header and exactly one is linked into the addon:
 *   - native/src/trtllm-executor.cc: TensorRT-LLM's C++ Executor API (the only file that includes
 *     tensorrt_llm/executor/executor.h; built only when TRTLLM_ROOT is given);
 *   - native/src/fake-executor.cc: a deterministic tiny "model" with the executor's semantics, for tests.
 * The addon (native/src/binding.cc) includes this header only.
 *
 * Rules of the boundary:
 *   - C linkage, plain structs, no C++ types; nothing throws across it.
 *   - Every call that can fail returns a loom_trtllm_status and, on failure, writes a NUL-terminated
 *     message into the caller's buffer `err` of `err_size` bytes (truncated to fit; may be NULL/0).
 *   - Pointers in request/options structs are borrowed for the duration of the call only: the
 *     implementation copies what it keeps (token ids, LoRA weights, schema text).
 *   - Threads: loom_trtllm_enqueue, _cancel and _stats may be called from any thread, concurrently
 *     with one thread blocked in loom_trtllm_await. loom_trtllm_shutdown and loom_trtllm_await must
 *     not run concurrently with each other (the addon calls both from its poller thread).
 *     loom_trtllm_destroy is called once, after every other call has returned.
 */
#ifndef LOOM_TRTLLM_H
#define LOOM_TRTLLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct below changes layout; the addon checks it against the linked implementation.
 * 2: executor options gained comm_mode and worker_path (appended), capabilities gained library_path
 *    (appended), and loom_trtllm_info_get was added. */
#define LOOM_TRTLLM_ABI_VERSION 2

typedef enum loom_trtllm_status {
  LOOM_TRTLLM_OK = 0,
  /* An argument is out of range or inconsistent (the message names the field and the values). */
  LOOM_TRTLLM_INVALID_ARGUMENT = 1,
  /* The executor was shut down: no new work is accepted; loom_trtllm_await has nothing more to give. */
  LOOM_TRTLLM_SHUT_DOWN = 2,
  /* The request asks for something this build cannot do (for example guided decoding). */
  LOOM_TRTLLM_UNSUPPORTED = 3,
  /* The executor's queue is full (executor option max_queue_size). */
  LOOM_TRTLLM_QUEUE_FULL = 4,
  /* The engine could not be loaded (missing directory, bad config, wrong library version). */
  LOOM_TRTLLM_ENGINE_INVALID = 5,
  /* Anything else the implementation reported; the message carries its text. */
  LOOM_TRTLLM_INTERNAL = 6
} loom_trtllm_status;

/* Element types of a LoRA weights tensor (TensorRT-LLM wants the engine's dtype). */
typedef enum loom_trtllm_dtype {
  LOOM_TRTLLM_DTYPE_FLOAT16 = 0,
  LOOM_TRTLLM_DTYPE_BFLOAT16 = 1,
  LOOM_TRTLLM_DTYPE_FLOAT32 = 2
} loom_trtllm_dtype;

/* Why a sequence stopped; values 0..5 are TensorRT-LLM's FinishReason, ERROR is ours. */
typedef enum loom_trtllm_finish_reason {
  LOOM_TRTLLM_FINISH_NOT_FINISHED = 0,
  LOOM_TRTLLM_FINISH_END_ID = 1,
  LOOM_TRTLLM_FINISH_STOP_WORDS = 2,
  LOOM_TRTLLM_FINISH_LENGTH = 3,
  LOOM_TRTLLM_FINISH_TIMED_OUT = 4,
  LOOM_TRTLLM_FINISH_CANCELLED = 5,
  /* The response carries an error (loom_trtllm_response.error) and is final. */
  LOOM_TRTLLM_FINISH_ERROR = 6
} loom_trtllm_finish_reason;

/* What an error response means, so callers need not parse the text (which stays verbatim). */
typedef enum loom_trtllm_error_kind {
  LOOM_TRTLLM_ERROR_NONE = 0,
  /* "LoRA task <id> not found in cache. Please send LoRA weights with request": re-send with weights. */
  LOOM_TRTLLM_ERROR_LORA_NOT_CACHED = 1,
  /* The LoRA cache cannot hold the task (every cached task is in use, or it is larger than the cache). */
  LOOM_TRTLLM_ERROR_LORA_CACHE_FULL = 2,
  /* The executor rejected the request's contents (LoRA tensors, lengths, ids). */
  LOOM_TRTLLM_ERROR_INVALID_REQUEST = 3,
  /* The executor shut down before the request finished. */
  LOOM_TRTLLM_ERROR_SHUT_DOWN = 4,
  LOOM_TRTLLM_ERROR_INTERNAL = 5
} loom_trtllm_error_kind;

/* How the executor spreads a tensor/pipeline-parallel engine over processes (TensorRT-LLM's
 * ParallelConfig CommunicationMode, plus SINGLE for "no parallel config"). */
typedef enum loom_trtllm_comm_mode {
  /* SINGLE when tensor_parallel * pipeline_parallel is 1, ORCHESTRATOR when it is more. */
  LOOM_TRTLLM_COMM_AUTO = 0,
  /* One process, one GPU; no MPI. Only for tensor_parallel * pipeline_parallel == 1. */
  LOOM_TRTLLM_COMM_SINGLE = 1,
  /* kLEADER: the caller runs on every MPI rank (mpirun -n tp*pp) and rank 0 takes the requests. Kept for
   * programs built for that; Loom's server is not (every rank would serve HTTP) and never asks for it. */
  LOOM_TRTLLM_COMM_LEADER = 2,
  /* kORCHESTRATOR: this process enqueues and awaits only; the executor spawns tp*pp worker processes
   * from worker_path (TensorRT-LLM's executorWorker) with MPI_Comm_spawn, and they load rank<N>.engine.
   * This process must not run under mpirun with more than one rank (TensorRT-LLM wants world size 1). */
  LOOM_TRTLLM_COMM_ORCHESTRATOR = 3
} loom_trtllm_comm_mode;

/* Opaque executor handle. */
typedef struct loom_trtllm_executor loom_trtllm_executor;

/* Executor options. Zero means "the implementation's default" unless a field says otherwise. */
typedef struct loom_trtllm_executor_options {
  /* Directory with config.json and rank<N>.engine (the fake reads nothing from it). */
  const char* engine_dir;
  /* Requests scheduled together; more wait in the queue. 0: the engine's build-time maximum. */
  int32_t max_batch_size;
  /* Tokens per iteration. 0: the engine's build-time maximum. */
  int32_t max_num_tokens;
  /* Queued requests beyond which enqueue fails with QUEUE_FULL. 0: unbounded. */
  int32_t max_queue_size;
  /* Share of free GPU memory for the KV cache, in (0, 1]. 0: 0.9. */
  float kv_cache_free_gpu_memory_fraction;
  /* Upper bound of KV cache tokens. 0: none. */
  int32_t kv_cache_max_tokens;
  /* Set explicitly because the executor's defaults changed across releases (false -> true). */
  int32_t enable_kv_cache_block_reuse; /* 0 or 1 */
  int32_t enable_chunked_context;      /* 0 or 1 */
  /* LoRA cache size in "module-layers": one row of a LoRA config tensor, at the maximum rank.
   * Host (CPU) and device (GPU) levels; the fake uses the host figure as its only level.
   * 0 with 0 bytes/percent below: the executor's default sizing. */
  int32_t lora_cache_host_module_layers;
  int32_t lora_cache_device_module_layers;
  /* Alternative sizings used when the module-layer counts are 0. */
  uint64_t lora_cache_host_bytes;
  float lora_cache_device_percent; /* of free GPU memory, (0, 1] */
  /* Medusa tree: medusa_num_choices paths, path i = medusa_choices[medusa_choice_offsets[i] ..
   * medusa_choice_offsets[i+1]) (offsets has medusa_num_choices + 1 entries). 0 paths: no Medusa. */
  const int32_t* medusa_choices;
  const int32_t* medusa_choice_offsets;
  size_t medusa_num_choices;
  /* Multi-GPU: tensor and pipeline parallel sizes (0 or 1: single GPU) and the CUDA device ids to use,
   * one per rank (NULL/0: the executor picks 0..tp*pp-1). comm_mode and worker_path (below) say how the
   * ranks are started. */
  int32_t tensor_parallel;
  int32_t pipeline_parallel;
  const int32_t* device_ids;
  size_t num_device_ids;
  /* Iterations of statistics the executor keeps. 0: 1000. */
  int32_t iter_stats_max_iterations;
  /* Guided decoding (xgrammar), when the build has it: the tokenizer's vocabulary as the grammar backend
   * sees it (guided_vocab_size NUL-terminated strings, index = token id), the tokenizer.json text (or NULL)
   * and the ids that end a guided sequence. guided_vocab_size 0: guided decoding off for this executor. */
  const char* const* guided_vocab;
  size_t guided_vocab_size;
  const char* guided_tokenizer_json;
  const int32_t* guided_stop_token_ids;
  size_t num_guided_stop_token_ids;
  /* Fake only (ignored by TensorRT-LLM): microseconds per generation step (0: 1000), tokens added to each
   * active request per step (0: 1), and the vocabulary size of its token function (0: 32000). */
  int32_t fake_step_us;
  int32_t fake_tokens_per_step;
  int32_t fake_vocab_size;
  /* ABI 2. How the ranks run (see loom_trtllm_comm_mode; 0: AUTO). */
  loom_trtllm_comm_mode comm_mode;
  /* ORCHESTRATOR: TensorRT-LLM's executorWorker binary, an existing executable file (create fails with
   * INVALID_ARGUMENT naming worker_path otherwise, in the fake too). Ignored in the other modes. */
  const char* worker_path;
} loom_trtllm_executor_options;

/* One generation request. Optional numeric fields have a has_* flag. */
typedef struct loom_trtllm_request {
  /* [num_input_ids] prompt token ids; at least one. */
  const int32_t* input_ids;
  size_t num_input_ids;
  /* New tokens to generate at most (>= 1). */
  int32_t max_tokens;
  /* 1: a response per step with the new tokens; 0: one final response with all tokens. */
  int32_t streaming;

  /* Sampling (beam width is always 1). top_k 0: off; top_p 0: off; temperature > 0. Greedy is top_k 1. */
  int32_t top_k;
  float top_p;
  float temperature;
  float repetition_penalty; /* 1: off */
  float presence_penalty;   /* 0: off */
  float frequency_penalty;  /* 0: off */
  int32_t has_seed;
  uint64_t seed;
  int32_t min_tokens; /* 0: none */

  /* End and padding ids; -1: none (TensorRT-LLM then uses the engine's). One end id: more end ids are
   * single-token stop words. */
  int32_t end_id;
  int32_t pad_id;

  /* Stop and bad word lists: num_* sequences, sequence i has *_lengths[i] tokens, concatenated in order
   * in *_tokens. A stop word ends the request (reason STOP_WORDS) after its last token is generated;
   * the stop word's tokens are part of the output. */
  const int32_t* stop_words_tokens;
  const int32_t* stop_words_lengths;
  size_t num_stop_words;
  const int32_t* bad_words_tokens;
  const int32_t* bad_words_lengths;
  size_t num_bad_words;

  /* Echoed in every response when has_client_id. */
  int32_t has_client_id;
  uint64_t client_id;
  /* 1: responses carry each new token's log probability. */
  int32_t return_log_probs;

  /* LoRA: has_lora 0 means the base model. With weights, the executor caches them under the task id;
   * without (lora_weights NULL), the task must already be cached, else the request gets the error
   * LORA_NOT_CACHED. weights: [shape[0] module-layers, shape[1] maxRow] in lora_weights_dtype, row i =
   * A [r, in] then B [out, r] flattened, zero-padded; config: int32 [shape[0], 3 (or 4 with is_dora)],
   * rows (module id, layer, rank). The two dim0 must match. */
  int32_t has_lora;
  uint64_t lora_task_id;
  const void* lora_weights;
  size_t lora_weights_bytes;
  loom_trtllm_dtype lora_weights_dtype;
  int64_t lora_weights_shape[2];
  const int32_t* lora_config;
  int64_t lora_config_shape[2];

  /* Guided decoding: a JSON schema (NUL-terminated); NULL: none. UNSUPPORTED when the build has no
   * guided decoding (loom_trtllm_capabilities) or the executor was created without guided_vocab. */
  const char* guided_json_schema;
} loom_trtllm_request;

/* One response. Pointers stay valid until the batch holding it is freed. */
typedef struct loom_trtllm_response {
  uint64_t request_id;
  int32_t has_client_id;
  uint64_t client_id;
  /* [num_tokens] tokens generated since the previous response of this request (streaming), or all of
   * them (not streaming). Never the prompt. */
  const int32_t* tokens;
  size_t num_tokens;
  /* [num_tokens] natural-log probabilities, or NULL when not requested or not available. */
  const float* log_probs;
  /* 1 on the request's last response. */
  int32_t is_final;
  loom_trtllm_finish_reason finish_reason;
  /* Error responses: kind and the executor's text verbatim (NUL-terminated); NONE and NULL otherwise. */
  loom_trtllm_error_kind error_kind;
  const char* error;
} loom_trtllm_response;

/* A batch from loom_trtllm_await, owned by the implementation until loom_trtllm_responses_free. */
typedef struct loom_trtllm_responses {
  const loom_trtllm_response* items;
  size_t count;
} loom_trtllm_responses;

/* The latest iteration's figures (TensorRT-LLM IterationStats) and the LoRA cache. */
typedef struct loom_trtllm_stats {
  uint64_t iteration;
  int32_t active_requests;
  int32_t queued_requests;
  int32_t max_active_requests;
  int64_t kv_blocks_max;
  int64_t kv_blocks_free;
  int64_t kv_blocks_used;
  int32_t kv_tokens_per_block;
  double iteration_latency_ms;
  /* LoRA tasks cached, and module-layers used and available (fake; -1 where TensorRT-LLM does not say). */
  int32_t lora_tasks_cached;
  int64_t lora_cache_module_layers_used;
  int64_t lora_cache_module_layers_total;
} loom_trtllm_stats;

/* Compile-time facts of the linked implementation. */
typedef struct loom_trtllm_capabilities {
  int32_t abi_version;     /* LOOM_TRTLLM_ABI_VERSION it was built with */
  const char* impl;        /* "fake" or "tensorrt-llm" (static string) */
  const char* version;     /* implementation version text (static string) */
  int32_t guided_decoding; /* 1: guided_json_schema is honoured */
  int32_t medusa;          /* 1: medusa_choices are honoured */
  /* ABI 2. The shared library the implementation runs from (libtensorrt_llm.so, found with dladdr), so
   * callers can find files installed next to it (bin/executorWorker); NULL for the fake. */
  const char* library_path;
} loom_trtllm_capabilities;

/* What an executor was created with, as the implementation resolved it (for logs and tests). */
typedef struct loom_trtllm_executor_info {
  loom_trtllm_comm_mode comm_mode; /* the effective mode: never AUTO */
  int32_t world_size;              /* tensor_parallel * pipeline_parallel */
  int32_t spawned_workers;         /* processes the executor spawned: world_size in ORCHESTRATOR, else 0 */
  const char* worker_path;         /* ORCHESTRATOR: the executorWorker given; NULL otherwise */
  const int32_t* device_ids;       /* as given (NULL/0: the executor's default, 0..world_size-1) */
  size_t num_device_ids;
} loom_trtllm_executor_info;

/* Facts of the linked implementation; needs no executor. */
void loom_trtllm_get_capabilities(loom_trtllm_capabilities* out);

/* Load the engine and start the executor. On OK *out is a new handle. Blocks (seconds to minutes). */
loom_trtllm_status loom_trtllm_create(const loom_trtllm_executor_options* options, loom_trtllm_executor** out,
                                      char* err, size_t err_size);

/* Queue a request; on OK *request_id is its id (> 0, unique per executor). */
loom_trtllm_status loom_trtllm_enqueue(loom_trtllm_executor* ex, const loom_trtllm_request* request,
                                       uint64_t* request_id, char* err, size_t err_size);

/* Wait up to timeout_ms for responses of any request. OK with count 0 on timeout. After shutdown, once
 * every remaining response was handed out, returns SHUT_DOWN with an empty batch. Free *out with
 * loom_trtllm_responses_free whatever the status. */
loom_trtllm_status loom_trtllm_await(loom_trtllm_executor* ex, int32_t timeout_ms, loom_trtllm_responses** out,
                                     char* err, size_t err_size);

void loom_trtllm_responses_free(loom_trtllm_responses* responses);

/* Ask to stop a request; its final response (reason CANCELLED) follows through await. Unknown or
 * finished ids are ignored (OK), as TensorRT-LLM does. */
loom_trtllm_status loom_trtllm_cancel(loom_trtllm_executor* ex, uint64_t request_id, char* err, size_t err_size);

/* The latest statistics. */
loom_trtllm_status loom_trtllm_stats_get(loom_trtllm_executor* ex, loom_trtllm_stats* out, char* err,
                                         size_t err_size);

/* What the executor was created with. Pointers stay valid until loom_trtllm_destroy. */
loom_trtllm_status loom_trtllm_info_get(loom_trtllm_executor* ex, loom_trtllm_executor_info* out, char* err,
                                        size_t err_size);

/* Stop the executor: enqueue fails with SHUT_DOWN from now on; every unfinished request gets a final
 * error response (kind SHUT_DOWN) through await, which then returns SHUT_DOWN. Blocks until the executor's
 * threads have stopped. Idempotent. */
loom_trtllm_status loom_trtllm_shutdown(loom_trtllm_executor* ex, char* err, size_t err_size);

/* Free the handle (shutting down first if needed). */
void loom_trtllm_destroy(loom_trtllm_executor* ex);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_TRTLLM_H */
