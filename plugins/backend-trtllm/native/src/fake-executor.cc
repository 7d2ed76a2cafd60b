// A fake of loom-trtllm.h: a deterministic tiny "model" with TensorRT-LLM Executor semantics, so the
// addon and the Backend can be tested on machines without a GPU or TensorRT-LLM.
//
// The model. Token i (0-based output position) of a request is
//   h = fnv1a64(prompt ids as int32 LE, task id u64 LE (0 without LoRA), seed u64 LE (0 when absent),
//               float32 bits of temperature u32 LE, i u32 LE)
//   m = splitmix64 finalizer of h (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27;
//       z *= 0x94d049bb133111eb; z ^= z >> 31), so that neighbouring positions look unrelated
//   token = m mod vocab_size,   log probability = -((m >> 32) mod 1000) / 100
// (src/native-api.ts `fakeToken` is the TS reference). A bad word is avoided by bumping the token
// to (token + 1) mod vocab until the output no longer ends with any bad word.
//
// The executor, as TensorRT-LLM behaves:
//   - a worker thread runs one step every fake_step_us; each step admits queued requests in FIFO order
//     while fewer than max_batch_size run, then adds fake_tokens_per_step tokens to every running one;
//   - streaming requests get a response per step with that step's new tokens; others one final response;
//   - a request ends on its end id (not part of the output), a stop word (part of the output) or
//     max_tokens, end id and stop words being ignored before min_tokens;
//   - cancel gives a final response with reason CANCELLED (and the tokens not yet delivered);
//   - shutdown refuses new work and ends every unfinished request with an error response;
//   - the LoRA cache holds lora_cache_host_module_layers config rows (0: 1024) and, when a task must be
//     stored, evicts the least recently used tasks that no running request uses. The cache is consulted
//     when a request is admitted: an id-only request for a task not cached gets TensorRT-LLM's exact
//     error "LoRA task <id> not found in cache. Please send LoRA weights with request".
// Multi-GPU: the fake runs in this one process whatever the options say. It checks comm_mode and
// worker_path as TensorRT-LLM would need them (a missing or non-executable executorWorker is refused at
// create, as the real implementation does before MPI_Comm_spawn) and reports what it received through
// loom_trtllm_info_get, so tests can see what the real executor would have been given.
// Thread safety: one mutex guards everything; enqueue/cancel/stats run on any thread, await on one.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "loom-trtllm.h"
#include "request-check.h"
#include "response-batch.h"

using loom_trtllm::fail;
using loom_trtllm::OwnedResponse;

namespace {

constexpr int32_t kDefaultMaxBatch = 8;
constexpr int32_t kDefaultStepUs = 1000;
constexpr int32_t kDefaultVocab = 32000;
constexpr int64_t kDefaultLoraRows = 1024;
// The fake's KV cache: fixed figures so stats have something to report.
constexpr int64_t kKvBlocks = 4096;
constexpr int32_t kKvTokensPerBlock = 64;

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// FNV-1a over `n` bytes of `v` in little-endian order (the byte order the TS reference writes).
template <typename T>
uint64_t fnv_mix(uint64_t h, T v) {
  for (size_t i = 0; i < sizeof(T); i++) {
    h ^= uint64_t((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
    h *= kFnvPrime;
  }
  return h;
}

uint64_t splitmix_final(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

struct CachedTask {
  int64_t rows = 0;        // module-layers (config rows) it occupies
  uint64_t last_use = 0;   // LRU clock
  int32_t pins = 0;        // running requests using it; pinned tasks are never evicted
};

struct FakeRequest {
  uint64_t id = 0;
  bool has_client_id = false;
  uint64_t client_id = 0;
  int32_t max_tokens = 0;
  bool streaming = false;
  int32_t min_tokens = 0;
  int32_t end_id = -1;
  bool return_log_probs = false;
  std::vector<std::vector<int32_t>> stop_words, bad_words;
  bool has_lora = false;
  uint64_t task_id = 0;
  // Weights were sent: store the task (config rows counted) on admission.
  int64_t lora_rows = 0;
  bool lora_pinned = false;
  uint64_t prefix_hash = 0;  // fnv state after prompt, task, seed, temperature
  std::vector<int32_t> output;
  std::vector<float> log_probs;
  size_t delivered = 0;  // output tokens already sent (streaming)
  bool finished = false;  // its final response is queued; it leaves the batch at the end of the step
};

bool ends_with(const std::vector<int32_t>& out, const std::vector<int32_t>& word) {
  return word.size() <= out.size() && std::equal(word.rbegin(), word.rend(), out.rbegin());
}

}  // namespace

struct loom_trtllm_executor {
  // Options, fixed at create.
  int32_t max_batch = kDefaultMaxBatch;
  int32_t max_queue = 0;
  int32_t step_us = kDefaultStepUs;
  int32_t tokens_per_step = 1;
  int32_t vocab = kDefaultVocab;
  int64_t lora_capacity = kDefaultLoraRows;
  loom_trtllm::ParallelSetup parallel;  // what create received (loom_trtllm_info_get)

  std::mutex mu;
  std::mutex shutdown_mu;  // serialises shutdown calls (the join runs outside mu)
  std::condition_variable worker_cv;  // wakes the worker for shutdown
  std::condition_variable ready_cv;   // wakes await
  bool shut_down = false;  // no new work; the worker stops
  bool stopped = false;    // shutdown has queued every final response: await may report SHUT_DOWN
  uint64_t next_id = 1;
  uint64_t iteration = 0;
  uint64_t lru_clock = 0;
  std::deque<std::unique_ptr<FakeRequest>> queue;
  std::vector<std::unique_ptr<FakeRequest>> running;
  std::unordered_set<uint64_t> cancelled;
  std::deque<OwnedResponse> ready;
  std::unordered_map<uint64_t, CachedTask> lora_cache;
  int64_t lora_rows_used = 0;
  std::thread worker;

  void run();
  void step_locked();
  bool admit_lora_locked(FakeRequest& r);
  void finish_locked(FakeRequest& r, loom_trtllm_finish_reason reason);
  void fail_locked(FakeRequest& r, loom_trtllm_error_kind kind, const std::string& text);
  void unpin_locked(FakeRequest& r);
};

// Worker: one step per step_us on a steady clock, until shutdown.
void loom_trtllm_executor::run() {
  std::unique_lock<std::mutex> lock(mu);
  auto next = std::chrono::steady_clock::now();
  while (!shut_down) {
    next += std::chrono::microseconds(step_us);
    worker_cv.wait_until(lock, next, [this] { return shut_down; });
    if (shut_down) break;
    step_locked();
    // After a stall (a slow machine), do not try to catch up with a burst of steps.
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;
  }
}

void loom_trtllm_executor::unpin_locked(FakeRequest& r) {
  if (!r.lora_pinned) return;
  auto it = lora_cache.find(r.task_id);
  if (it != lora_cache.end()) it->second.pins--;
  r.lora_pinned = false;
}

void loom_trtllm_executor::finish_locked(FakeRequest& r, loom_trtllm_finish_reason reason) {
  OwnedResponse resp;
  resp.request_id = r.id;
  resp.has_client_id = r.has_client_id;
  resp.client_id = r.client_id;
  // Streaming: what was not delivered yet; otherwise the whole output.
  const size_t from = r.streaming ? r.delivered : 0;
  resp.tokens.assign(r.output.begin() + long(from), r.output.end());
  if (r.return_log_probs) {
    resp.has_log_probs = true;
    resp.log_probs.assign(r.log_probs.begin() + long(from), r.log_probs.end());
  }
  resp.is_final = true;
  resp.reason = reason;
  r.delivered = r.output.size();
  r.finished = true;
  ready.push_back(std::move(resp));
  unpin_locked(r);
}

void loom_trtllm_executor::fail_locked(FakeRequest& r, loom_trtllm_error_kind kind, const std::string& text) {
  OwnedResponse resp;
  resp.request_id = r.id;
  resp.has_client_id = r.has_client_id;
  resp.client_id = r.client_id;
  resp.is_final = true;
  resp.reason = LOOM_TRTLLM_FINISH_ERROR;
  resp.error_kind = kind;
  resp.error = text;
  r.finished = true;
  ready.push_back(std::move(resp));
  unpin_locked(r);
}

// The LoRA cache at admission, as TensorRT-LLM's PEFT cache manager does it. False: r failed.
bool loom_trtllm_executor::admit_lora_locked(FakeRequest& r) {
  if (!r.has_lora) return true;
  auto it = lora_cache.find(r.task_id);
  if (it == lora_cache.end()) {
    if (r.lora_rows == 0) {
      fail_locked(r, LOOM_TRTLLM_ERROR_LORA_NOT_CACHED, loom_trtllm::lora_not_cached_message(r.task_id));
      return false;
    }
    if (r.lora_rows > lora_capacity) {
      fail_locked(r, LOOM_TRTLLM_ERROR_LORA_CACHE_FULL,
                  "PEFT Cache is full. Could not store taskId=" + std::to_string(r.task_id) + " (" +
                      std::to_string(r.lora_rows) + " module-layers; the cache holds " +
                      std::to_string(lora_capacity) + ")");
      return false;
    }
    // Evict least recently used unpinned tasks until the new one fits.
    while (lora_rows_used + r.lora_rows > lora_capacity) {
      auto victim = lora_cache.end();
      for (auto c = lora_cache.begin(); c != lora_cache.end(); ++c)
        if (c->second.pins == 0 && (victim == lora_cache.end() || c->second.last_use < victim->second.last_use))
          victim = c;
      if (victim == lora_cache.end()) {
        fail_locked(r, LOOM_TRTLLM_ERROR_LORA_CACHE_FULL,
                    "PEFT Cache is full. Could not store taskId=" + std::to_string(r.task_id) +
                        ": Cache is full. There are no done tasks to evict");
        return false;
      }
      lora_rows_used -= victim->second.rows;
      lora_cache.erase(victim);
    }
    it = lora_cache.emplace(r.task_id, CachedTask{r.lora_rows, 0, 0}).first;
    lora_rows_used += r.lora_rows;
  }
  it->second.last_use = ++lru_clock;
  it->second.pins++;
  r.lora_pinned = true;
  return true;
}

void loom_trtllm_executor::step_locked() {
  iteration++;
  // Cancelled requests still queued end now, with nothing generated.
  for (auto q = queue.begin(); q != queue.end();) {
    if (cancelled.erase((*q)->id)) {
      finish_locked(**q, LOOM_TRTLLM_FINISH_CANCELLED);
      q = queue.erase(q);
    } else {
      ++q;
    }
  }
  // Admit in FIFO order while the batch has room.
  while (!queue.empty() && int32_t(running.size()) < max_batch) {
    std::unique_ptr<FakeRequest> r = std::move(queue.front());
    queue.pop_front();
    if (admit_lora_locked(*r)) running.push_back(std::move(r));
  }
  // Generate.
  for (auto& rp : running) {
    FakeRequest& r = *rp;
    if (cancelled.erase(r.id)) {
      finish_locked(r, LOOM_TRTLLM_FINISH_CANCELLED);
      continue;
    }
    loom_trtllm_finish_reason reason = LOOM_TRTLLM_FINISH_NOT_FINISHED;
    for (int32_t k = 0; k < tokens_per_step && reason == LOOM_TRTLLM_FINISH_NOT_FINISHED; k++) {
      const uint64_t h = splitmix_final(fnv_mix(r.prefix_hash, uint32_t(r.output.size())));
      int32_t token = int32_t(h % uint64_t(vocab));
      const float log_prob = -float((h >> 32) % 1000) / 100.0f;
      // Bad words: bump until no bad word ends the output (bounded: at most vocab tries).
      for (int32_t tries = 0; !r.bad_words.empty() && tries < vocab; tries++) {
        r.output.push_back(token);
        bool bad = false;
        for (const auto& w : r.bad_words) bad = bad || ends_with(r.output, w);
        r.output.pop_back();
        if (!bad) break;
        token = (token + 1) % vocab;
      }
      const bool may_stop = int32_t(r.output.size()) >= r.min_tokens;
      if (may_stop && r.end_id >= 0 && token == r.end_id) {
        reason = LOOM_TRTLLM_FINISH_END_ID;
        break;
      }
      r.output.push_back(token);
      r.log_probs.push_back(log_prob);
      if (may_stop)
        for (const auto& w : r.stop_words)
          if (ends_with(r.output, w)) reason = LOOM_TRTLLM_FINISH_STOP_WORDS;
      if (reason == LOOM_TRTLLM_FINISH_NOT_FINISHED && int32_t(r.output.size()) >= r.max_tokens)
        reason = LOOM_TRTLLM_FINISH_LENGTH;
    }
    if (reason != LOOM_TRTLLM_FINISH_NOT_FINISHED) {
      finish_locked(r, reason);
    } else if (r.streaming && r.output.size() > r.delivered) {
      OwnedResponse resp;
      resp.request_id = r.id;
      resp.has_client_id = r.has_client_id;
      resp.client_id = r.client_id;
      resp.tokens.assign(r.output.begin() + long(r.delivered), r.output.end());
      if (r.return_log_probs) {
        resp.has_log_probs = true;
        resp.log_probs.assign(r.log_probs.begin() + long(r.delivered), r.log_probs.end());
      }
      r.delivered = r.output.size();
      ready.push_back(std::move(resp));
    }
  }
  // Finished requests leave the batch.
  running.erase(std::remove_if(running.begin(), running.end(),
                               [](const std::unique_ptr<FakeRequest>& r) { return r->finished; }),
                running.end());
  if (!ready.empty()) ready_cv.notify_all();
}

extern "C" {

void loom_trtllm_get_capabilities(loom_trtllm_capabilities* out) {
  out->abi_version = LOOM_TRTLLM_ABI_VERSION;
  out->impl = "fake";
  out->version = "loom-fake-1";
  out->guided_decoding = 0;
  out->medusa = 1;  // accepted and ignored: the fake's tokens are the same with or without a tree
  out->library_path = nullptr;
}

loom_trtllm_status loom_trtllm_create(const loom_trtllm_executor_options* options, loom_trtllm_executor** out,
                                      char* err, size_t err_size) {
  if (!options || !out) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "options and out are required");
  const std::string bad = loom_trtllm::check_options(*options);
  if (!bad.empty()) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, bad);
  auto ex = std::make_unique<loom_trtllm_executor>();
  if (options->max_batch_size > 0) ex->max_batch = options->max_batch_size;
  ex->max_queue = options->max_queue_size;
  if (options->fake_step_us > 0) ex->step_us = options->fake_step_us;
  if (options->fake_tokens_per_step > 0) ex->tokens_per_step = options->fake_tokens_per_step;
  if (options->fake_vocab_size > 0) ex->vocab = options->fake_vocab_size;
  if (options->lora_cache_host_module_layers > 0) ex->lora_capacity = options->lora_cache_host_module_layers;
  try {
    ex->parallel = loom_trtllm::parallel_setup(*options);
    ex->worker = std::thread([p = ex.get()] { p->run(); });
  } catch (const std::exception& e) {
    return fail(LOOM_TRTLLM_INTERNAL, err, err_size, std::string("cannot start the fake's worker thread: ") + e.what());
  }
  *out = ex.release();
  return LOOM_TRTLLM_OK;
}

loom_trtllm_status loom_trtllm_enqueue(loom_trtllm_executor* ex, const loom_trtllm_request* request,
                                       uint64_t* request_id, char* err, size_t err_size) {
  if (!ex || !request || !request_id)
    return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor, request and request_id are required");
  const std::string bad = loom_trtllm::check_request(*request);
  if (!bad.empty()) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, bad);
  if (request->guided_json_schema)
    return fail(LOOM_TRTLLM_UNSUPPORTED, err, err_size, "guided decoding (a JSON schema) is not available in the fake executor");
  try {
    auto r = std::make_unique<FakeRequest>();
    const loom_trtllm_request& q = *request;
    r->has_client_id = q.has_client_id != 0;
    r->client_id = q.client_id;
    r->max_tokens = q.max_tokens;
    r->streaming = q.streaming != 0;
    r->min_tokens = q.min_tokens;
    r->end_id = q.end_id;
    r->return_log_probs = q.return_log_probs != 0;
    r->stop_words = loom_trtllm::word_list(q.stop_words_tokens, q.stop_words_lengths, q.num_stop_words);
    r->bad_words = loom_trtllm::word_list(q.bad_words_tokens, q.bad_words_lengths, q.num_bad_words);
    r->has_lora = q.has_lora != 0;
    r->task_id = r->has_lora ? q.lora_task_id : 0;
    // The fake keeps no weights, only how many cache rows they take (dim0 of both tensors).
    r->lora_rows = r->has_lora && q.lora_weights ? q.lora_weights_shape[0] : 0;
    uint64_t h = kFnvOffset;
    for (size_t i = 0; i < q.num_input_ids; i++) h = fnv_mix(h, uint32_t(q.input_ids[i]));
    h = fnv_mix(h, r->task_id);
    h = fnv_mix(h, q.has_seed ? q.seed : uint64_t(0));
    h = fnv_mix(h, float_bits(q.temperature));
    r->prefix_hash = h;

    std::lock_guard<std::mutex> lock(ex->mu);
    if (ex->shut_down) return fail(LOOM_TRTLLM_SHUT_DOWN, err, err_size, "the executor was shut down; no new requests");
    if (ex->max_queue > 0 && int32_t(ex->queue.size()) >= ex->max_queue)
      return fail(LOOM_TRTLLM_QUEUE_FULL, err, err_size,
                  "the executor's queue is full (" + std::to_string(ex->max_queue) + " requests waiting)");
    r->id = ex->next_id++;
    *request_id = r->id;
    ex->queue.push_back(std::move(r));
    return LOOM_TRTLLM_OK;
  } catch (const std::exception& e) {
    return fail(LOOM_TRTLLM_INTERNAL, err, err_size, e.what());
  }
}

loom_trtllm_status loom_trtllm_await(loom_trtllm_executor* ex, int32_t timeout_ms, loom_trtllm_responses** out,
                                     char* err, size_t err_size) {
  if (!ex || !out) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor and out are required");
  std::vector<OwnedResponse> owned;
  bool done = false;
  {
    std::unique_lock<std::mutex> lock(ex->mu);
    ex->ready_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms),
                          [ex] { return !ex->ready.empty() || ex->stopped; });
    owned.assign(std::make_move_iterator(ex->ready.begin()), std::make_move_iterator(ex->ready.end()));
    ex->ready.clear();
    done = ex->stopped && owned.empty();
  }
  *out = loom_trtllm::make_batch(std::move(owned));
  if (done) return fail(LOOM_TRTLLM_SHUT_DOWN, err, err_size, "the executor was shut down");
  return LOOM_TRTLLM_OK;
}

loom_trtllm_status loom_trtllm_cancel(loom_trtllm_executor* ex, uint64_t request_id, char* err, size_t err_size) {
  if (!ex) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor is required");
  std::lock_guard<std::mutex> lock(ex->mu);
  if (ex->shut_down) return LOOM_TRTLLM_OK;  // every request already got its final response
  // Only ids still queued or running: a finished id must not linger in the set.
  bool live = false;
  for (const auto& r : ex->queue) live = live || r->id == request_id;
  for (const auto& r : ex->running) live = live || r->id == request_id;
  if (live) ex->cancelled.insert(request_id);
  return LOOM_TRTLLM_OK;
}

loom_trtllm_status loom_trtllm_stats_get(loom_trtllm_executor* ex, loom_trtllm_stats* out, char* err,
                                         size_t err_size) {
  if (!ex || !out) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor and out are required");
  std::lock_guard<std::mutex> lock(ex->mu);
  loom_trtllm_stats s{};
  s.iteration = ex->iteration;
  s.active_requests = int32_t(ex->running.size());
  s.queued_requests = int32_t(ex->queue.size());
  s.max_active_requests = ex->max_batch;
  // One block per running request: enough for the figures to move with load.
  const int64_t used = int64_t(ex->running.size());
  s.kv_blocks_max = kKvBlocks;
  s.kv_blocks_used = used;
  s.kv_blocks_free = kKvBlocks - used;
  s.kv_tokens_per_block = kKvTokensPerBlock;
  s.iteration_latency_ms = ex->step_us / 1000.0;
  s.lora_tasks_cached = int32_t(ex->lora_cache.size());
  s.lora_cache_module_layers_used = ex->lora_rows_used;
  s.lora_cache_module_layers_total = ex->lora_capacity;
  *out = s;
  return LOOM_TRTLLM_OK;
}

loom_trtllm_status loom_trtllm_info_get(loom_trtllm_executor* ex, loom_trtllm_executor_info* out, char* err,
                                        size_t err_size) {
  if (!ex || !out) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor and out are required");
  ex->parallel.fill(out);  // fixed at create: no lock needed
  return LOOM_TRTLLM_OK;
}

loom_trtllm_status loom_trtllm_shutdown(loom_trtllm_executor* ex, char* err, size_t err_size) {
  if (!ex) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor is required");
  std::lock_guard<std::mutex> once(ex->shutdown_mu);
  {
    std::lock_guard<std::mutex> lock(ex->mu);
    if (ex->stopped) return LOOM_TRTLLM_OK;
    ex->shut_down = true;
  }
  ex->worker_cv.notify_all();
  if (ex->worker.joinable()) ex->worker.join();
  std::lock_guard<std::mutex> lock(ex->mu);
  const std::string text = "the executor shut down before the request finished";
  for (auto& r : ex->running) ex->fail_locked(*r, LOOM_TRTLLM_ERROR_SHUT_DOWN, text);
  for (auto& r : ex->queue) ex->fail_locked(*r, LOOM_TRTLLM_ERROR_SHUT_DOWN, text);
  ex->running.clear();
  ex->queue.clear();
  ex->cancelled.clear();
  ex->stopped = true;
  ex->ready_cv.notify_all();
  return LOOM_TRTLLM_OK;
}

void loom_trtllm_destroy(loom_trtllm_executor* ex) {
  if (!ex) return;
  loom_trtllm_shutdown(ex, nullptr, 0);
  delete ex;
}

}  // extern "C"
