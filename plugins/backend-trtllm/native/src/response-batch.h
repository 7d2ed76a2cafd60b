// Responses as both implementations of loom-trtllm.h build them, and the batch loom_trtllm_await
// hands out: owned C++ values plus the plain views the ABI exposes, freed together.
#ifndef LOOM_TRTLLM_RESPONSE_BATCH_H
#define LOOM_TRTLLM_RESPONSE_BATCH_H

#include <cstdint>
#include <string>
#include <vector>

#include "loom-trtllm.h"

namespace loom_trtllm {

struct OwnedResponse {
  uint64_t request_id = 0;
  bool has_client_id = false;
  uint64_t client_id = 0;
  std::vector<int32_t> tokens;  // new tokens (streaming) or all of them; never the prompt
  std::vector<float> log_probs;
  bool has_log_probs = false;
  bool is_final = false;
  loom_trtllm_finish_reason reason = LOOM_TRTLLM_FINISH_NOT_FINISHED;
  loom_trtllm_error_kind error_kind = LOOM_TRTLLM_ERROR_NONE;
  std::string error;
};

// A heap batch whose items point into `owned`; loom_trtllm_responses_free (response-batch.cc) deletes it.
loom_trtllm_responses* make_batch(std::vector<OwnedResponse>&& owned);

}  // namespace loom_trtllm

#endif
