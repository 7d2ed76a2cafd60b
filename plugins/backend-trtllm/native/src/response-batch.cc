// The response batch shared by both implementations (see response-batch.h).
#include "response-batch.h"

#include <memory>
#include <utility>

namespace loom_trtllm {

namespace {

// The ABI's batch plus what its pointers borrow; deleted through the base pointer's static type.
struct Batch : loom_trtllm_responses {
  std::vector<OwnedResponse> owned;
  std::vector<loom_trtllm_response> views;
};

}  // namespace

loom_trtllm_responses* make_batch(std::vector<OwnedResponse>&& owned) {
  auto b = std::make_unique<Batch>();
  b->owned = std::move(owned);
  b->views.reserve(b->owned.size());
  for (const OwnedResponse& o : b->owned) {
    loom_trtllm_response v{};
    v.request_id = o.request_id;
    v.has_client_id = o.has_client_id;
    v.client_id = o.client_id;
    v.tokens = o.tokens.data();
    v.num_tokens = o.tokens.size();
    v.log_probs = o.has_log_probs ? o.log_probs.data() : nullptr;
    v.is_final = o.is_final;
    v.finish_reason = o.reason;
    v.error_kind = o.error_kind;
    v.error = o.error_kind == LOOM_TRTLLM_ERROR_NONE ? nullptr : o.error.c_str();
    b->views.push_back(v);
  }
  b->items = b->views.data();
  b->count = b->views.size();
  return b.release();
}

}  // namespace loom_trtllm

extern "C" void loom_trtllm_responses_free(loom_trtllm_responses* responses) {
  delete static_cast<loom_trtllm::Batch*>(responses);
}
