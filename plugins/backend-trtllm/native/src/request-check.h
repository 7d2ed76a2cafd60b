// Checks of the C ABI's plain structs that both implementations share (the fake and the
// TensorRT-LLM one), so an argument error reads the same whichever is linked.
#ifndef LOOM_TRTLLM_REQUEST_CHECK_H
#define LOOM_TRTLLM_REQUEST_CHECK_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom-trtllm.h"

namespace loom_trtllm {

// Copy `msg` into the caller's buffer (NUL-terminated, truncated to fit) and return `st`.
loom_trtllm_status fail(loom_trtllm_status st, char* err, size_t err_size, const std::string& msg);

// Bytes per element of a LoRA weights dtype; 0 for an unknown value.
size_t dtype_size(int dtype);
const char* dtype_name(int dtype);

// Empty when `r` is well formed, else one message naming the field, the limit and the value.
// Checks lengths, ranges, word lists and the LoRA tensors' dtype and every dimension:
//   weights [n, maxRow] in the given dtype (bytes = n * maxRow * dtype size),
//   config  int32 [n, 3] (module id, layer, rank) or [n, 4] (+ is_dora), same n.
std::string check_request(const loom_trtllm_request& r);

// Empty when `o` is well formed, else a message as above.
std::string check_options(const loom_trtllm_executor_options& o);

// A word list of the ABI (flat tokens + lengths) as one vector per word; assumes check_request passed.
std::vector<std::vector<int32_t>> word_list(const int32_t* tokens, const int32_t* lengths, size_t count);

// The Medusa tree of the options as one path per entry; assumes check_options passed.
std::vector<std::vector<int32_t>> medusa_paths(const loom_trtllm_executor_options& o);

// How an executor's ranks run, resolved from the options (AUTO made explicit), with the storage that
// loom_trtllm_executor_info points into. Both implementations keep one for loom_trtllm_info_get.
struct ParallelSetup {
  loom_trtllm_comm_mode mode = LOOM_TRTLLM_COMM_SINGLE;
  int32_t world = 1;        // tensor_parallel * pipeline_parallel
  std::string worker_path;  // ORCHESTRATOR only
  std::vector<int32_t> device_ids;
  void fill(loom_trtllm_executor_info* out) const;
};

// The setup of `o`; assumes check_options passed.
ParallelSetup parallel_setup(const loom_trtllm_executor_options& o);

// TensorRT-LLM's LoRA cache-miss text, which callers may match verbatim.
std::string lora_not_cached_message(uint64_t task_id);

}  // namespace loom_trtllm

#endif
