// loom-trtllm.h on TensorRT-LLM's C++ Executor API: the only file that includes
// tensorrt_llm/executor/executor.h. Built only when TRTLLM_ROOT is given (scripts/build.mjs).
//
// It uses API present from the 2024-10 upstream main (75057cd0) through the 1.x releases, through
// setters rather than positional constructors (those grow parameters between releases), and sets
// explicitly the defaults that changed: KvCacheConfig block reuse (false -> true) and
// ExecutorConfig chunked context (false -> true). Build flags:
//   LOOM_TRTLLM_HAS_GUIDED_DECODING  GuidedDecodingConfig/Params exist (1.x), from the headers;
//   _GLIBCXX_USE_CXX11_ABI           must match libtensorrt_llm.so (TRTLLM_CXX11_ABI);
//   ENABLE_BF16 ENABLE_FP8           as TensorRT-LLM itself builds (types.h includes cuda_bf16/fp8).
//
// Semantics kept equal to the fake (native/src/fake-executor.cc):
//   - outputs exclude the prompt (OutputConfig.excludeInputFromOutput) and, when streaming, carry only
//     the new tokens (returnAllGeneratedTokens false);
//   - cancel ends with reason CANCELLED: kCANCELLED where the release has it, else a final response of a
//     request we cancelled that reports kNOT_FINISHED;
//   - shutdown ends every request still live with an error response of kind SHUT_DOWN, because the
//     executor's own shutdown stops without answering them.
// Multi-GPU (tp*pp > 1) runs in orchestrator mode: this process is TensorRT-LLM's orchestrator, which
// MPI_Comm_spawns tp*pp processes of worker_path (executorWorker) that load rank<N>.engine; requests and
// responses go to and from the leader worker over MPI. Only the orchestrator may enqueue and await, which
// is all this file does. Participant ids stay unset (TensorRT-LLM refuses them when it spawns).
// Every call into TensorRT-LLM is wrapped: its exceptions become statuses and messages.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "tensorrt_llm/executor/executor.h"
#include "loom-trtllm.h"
#include "request-check.h"
#include "response-batch.h"

#ifndef LOOM_TRTLLM_HAS_GUIDED_DECODING
#define LOOM_TRTLLM_HAS_GUIDED_DECODING 0
#endif

// From libnvinfer_plugin_tensorrt_llm.so; declared here because its header (plugins/api/tllmPlugin.h)
// pulls in TensorRT's NvInfer headers. A null logger keeps TensorRT-LLM's default one.
extern "C" bool initTrtLlmPlugins(void* logger, char const* libNamespace);

namespace tle = tensorrt_llm::executor;
using loom_trtllm::fail;
using loom_trtllm::make_batch;
using loom_trtllm::OwnedResponse;

namespace {

// How long loom_trtllm_shutdown drains responses the executor produced before it stopped.
constexpr std::chrono::milliseconds kDrainTimeout{0};

tle::DataType to_tle(loom_trtllm_dtype d) {
  switch (d) {
    case LOOM_TRTLLM_DTYPE_BFLOAT16: return tle::DataType::kBF16;
    case LOOM_TRTLLM_DTYPE_FLOAT32: return tle::DataType::kFP32;
    default: return tle::DataType::kFP16;
  }
}

// An owning CPU tensor holding a copy of `bytes` bytes: the JS buffer may move after enqueue returns,
// and TensorRT-LLM keeps the tensor until its PEFT cache has stored it.
tle::Tensor cpu_copy(tle::DataType type, const void* data, size_t bytes, int64_t rows, int64_t cols) {
  tle::Tensor t = tle::Tensor::cpu(type, {rows, cols});
  std::memcpy(t.getData(), data, bytes);
  return t;
}

// TensorRT-LLM reports per-request failures as text; these patterns are its own messages
// (batch_manager/peftCacheManager.cpp, runtime/loraUtils.cpp).
loom_trtllm_error_kind classify(const std::string& text) {
  if (text.find("not found in cache. Please send LoRA weights with request") != std::string::npos)
    return LOOM_TRTLLM_ERROR_LORA_NOT_CACHED;
  if (text.find("Cache is full") != std::string::npos) return LOOM_TRTLLM_ERROR_LORA_CACHE_FULL;
  if (text.find("Expected") != std::string::npos || text.find("Invalid") != std::string::npos ||
      text.find("must be") != std::string::npos || text.find("not enabled for this model") != std::string::npos)
    return LOOM_TRTLLM_ERROR_INVALID_REQUEST;
  return LOOM_TRTLLM_ERROR_INTERNAL;
}

// FinishReason by value: kTIMED_OUT (4) and kCANCELLED (5) exist only in newer releases, and a switch on
// the enum would not compile against the older ones.
loom_trtllm_finish_reason finish_of(tle::FinishReason r) {
  switch (static_cast<int>(r)) {
    case 1: return LOOM_TRTLLM_FINISH_END_ID;
    case 2: return LOOM_TRTLLM_FINISH_STOP_WORDS;
    case 3: return LOOM_TRTLLM_FINISH_LENGTH;
    case 4: return LOOM_TRTLLM_FINISH_TIMED_OUT;
    case 5: return LOOM_TRTLLM_FINISH_CANCELLED;
    default: return LOOM_TRTLLM_FINISH_NOT_FINISHED;
  }
}

std::list<tle::VecTokens> to_words(const int32_t* tokens, const int32_t* lengths, size_t count) {
  std::list<tle::VecTokens> out;
  for (auto& w : loom_trtllm::word_list(tokens, lengths, count)) out.emplace_back(std::move(w));
  return out;
}

tle::ExecutorConfig executor_config(const loom_trtllm_executor_options& o) {
  tle::ExecutorConfig cfg(1);  // beam width 1: Loom samples, it never searches beams

  tle::KvCacheConfig kv;
  kv.setEnableBlockReuse(o.enable_kv_cache_block_reuse != 0);
  kv.setFreeGpuMemoryFraction(o.kv_cache_free_gpu_memory_fraction > 0 ? o.kv_cache_free_gpu_memory_fraction : 0.9f);
  if (o.kv_cache_max_tokens > 0) kv.setMaxTokens(o.kv_cache_max_tokens);
  cfg.setKvCacheConfig(kv);
  cfg.setEnableChunkedContext(o.enable_chunked_context != 0);
  // Requests admitted only when their whole KV need is guaranteed: no mid-generation eviction.
  cfg.setSchedulerConfig(tle::SchedulerConfig(tle::CapacitySchedulerPolicy::kGUARANTEED_NO_EVICT));
  cfg.setBatchingType(tle::BatchingType::kINFLIGHT);
  cfg.setNormalizeLogProbs(false);  // natural-log probabilities of the sampled tokens, as the fake reports
  if (o.max_batch_size > 0) cfg.setMaxBatchSize(o.max_batch_size);
  if (o.max_num_tokens > 0) cfg.setMaxNumTokens(o.max_num_tokens);
  if (o.max_queue_size > 0) cfg.setMaxQueueSize(o.max_queue_size);
  cfg.setIterStatsMaxIterations(o.iter_stats_max_iterations > 0 ? o.iter_stats_max_iterations : 1000);

  // LoRA cache: module-layer counts, else byte/percent sizing, else TensorRT-LLM's defaults.
  std::optional<float> device_percent;
  if (o.lora_cache_device_percent > 0) device_percent = o.lora_cache_device_percent;
  std::optional<size_t> host_bytes;
  if (o.lora_cache_host_bytes > 0) host_bytes = size_t(o.lora_cache_host_bytes);
  cfg.setPeftCacheConfig(tle::PeftCacheConfig(o.lora_cache_host_module_layers, o.lora_cache_device_module_layers,
                                              8, 64, 1, 1, 1, 24, 8, device_percent, host_bytes));

  // Medusa: the tree listed path by path (the C++ runtime needs every candidate explicitly).
  if (o.medusa_num_choices > 0) {
    tle::MedusaChoices choices;
    for (auto& p : loom_trtllm::medusa_paths(o)) choices.emplace_back(p.begin(), p.end());
    tle::DecodingConfig decoding;
    decoding.setMedusaChoices(choices);
    cfg.setDecodingConfig(decoding);
  }

  // Multi-GPU and device pinning (check_options made the mode consistent with tp*pp).
  const loom_trtllm::ParallelSetup setup = loom_trtllm::parallel_setup(o);
  if (setup.mode != LOOM_TRTLLM_COMM_SINGLE || !setup.device_ids.empty()) {
    tle::ParallelConfig parallel;
    parallel.setCommunicationType(tle::CommunicationType::kMPI);
    if (setup.mode == LOOM_TRTLLM_COMM_ORCHESTRATOR) {
      // isOrchestrator, the worker binary, no leader communicator of ours, spawn the workers: what
      // TensorRT-LLM's own executorWorker expects of its parent (executor_worker/executorWorker.cpp).
      tle::OrchestratorConfig orchestrator;
      orchestrator.setIsOrchestrator(true);
      orchestrator.setWorkerExecutablePath(setup.worker_path);
      orchestrator.setSpawnProcesses(true);
      parallel.setCommunicationMode(tle::CommunicationMode::kORCHESTRATOR);
      parallel.setOrchestratorConfig(orchestrator);
    } else {
      // LEADER, or SINGLE with device ids: a world of one rank in leader mode is the plain executor.
      parallel.setCommunicationMode(tle::CommunicationMode::kLEADER);
    }
    // The workers receive the device ids with the rest of this configuration.
    if (!setup.device_ids.empty())
      parallel.setDeviceIds(std::vector<tle::SizeType32>(setup.device_ids.begin(), setup.device_ids.end()));
    cfg.setParallelConfig(parallel);
  }

#if LOOM_TRTLLM_HAS_GUIDED_DECODING
  if (o.guided_vocab_size > 0) {
    std::vector<std::string> vocab(o.guided_vocab, o.guided_vocab + o.guided_vocab_size);
    std::optional<std::string> tokenizer;
    if (o.guided_tokenizer_json) tokenizer = std::string(o.guided_tokenizer_json);
    std::optional<std::vector<tle::TokenIdType>> stops;
    if (o.num_guided_stop_token_ids > 0)
      stops = std::vector<tle::TokenIdType>(o.guided_stop_token_ids, o.guided_stop_token_ids + o.num_guided_stop_token_ids);
    cfg.setGuidedDecodingConfig(tle::GuidedDecodingConfig(
        tle::GuidedDecodingConfig::GuidedDecodingBackend::kXGRAMMAR, std::move(vocab), std::move(tokenizer), std::move(stops)));
  }
#endif
  return cfg;
}

tle::Request to_request(const loom_trtllm_request& q) {
  tle::Request req(tle::VecTokens(q.input_ids, q.input_ids + q.num_input_ids), q.max_tokens);
  req.setStreaming(q.streaming != 0);
  // Explicit: only the new tokens in each streamed response.
  req.setReturnAllGeneratedTokens(false);

  tle::SamplingConfig s(1);
  if (q.top_k > 0) s.setTopK(q.top_k);
  if (q.top_p > 0) s.setTopP(q.top_p);
  s.setTemperature(q.temperature);
  s.setRepetitionPenalty(q.repetition_penalty);
  if (q.presence_penalty != 0) s.setPresencePenalty(q.presence_penalty);
  if (q.frequency_penalty != 0) s.setFrequencyPenalty(q.frequency_penalty);
  if (q.has_seed) s.setSeed(q.seed);
  if (q.min_tokens > 0) s.setMinTokens(q.min_tokens);
  req.setSamplingConfig(s);

  tle::OutputConfig out;
  out.returnLogProbs = q.return_log_probs != 0;
  out.excludeInputFromOutput = true;
  req.setOutputConfig(out);

  if (q.end_id >= 0) req.setEndId(q.end_id);
  if (q.pad_id >= 0) req.setPadId(q.pad_id);
  if (q.num_stop_words > 0) req.setStopWords(to_words(q.stop_words_tokens, q.stop_words_lengths, q.num_stop_words));
  if (q.num_bad_words > 0) req.setBadWords(to_words(q.bad_words_tokens, q.bad_words_lengths, q.num_bad_words));
  if (q.has_client_id) req.setClientId(q.client_id);

  if (q.has_lora) {
    if (q.lora_weights) {
      // weights [moduleLayers, maxRow] in the engine dtype; config int32 [moduleLayers, 3|4]
      const int64_t* ws = q.lora_weights_shape;
      const int64_t* cs = q.lora_config_shape;
      tle::Tensor weights = cpu_copy(to_tle(q.lora_weights_dtype), q.lora_weights, q.lora_weights_bytes, ws[0], ws[1]);
      tle::Tensor config = cpu_copy(tle::DataType::kINT32, q.lora_config, size_t(cs[0] * cs[1]) * sizeof(int32_t), cs[0], cs[1]);
      req.setLoraConfig(tle::LoraConfig(q.lora_task_id, weights, config));
    } else {
      req.setLoraConfig(tle::LoraConfig(q.lora_task_id));
    }
  }

#if LOOM_TRTLLM_HAS_GUIDED_DECODING
  if (q.guided_json_schema)
    req.setGuidedDecodingParams(
        tle::GuidedDecodingParams(tle::GuidedDecodingParams::GuideType::kJSON_SCHEMA, std::string(q.guided_json_schema)));
#endif
  return req;
}

}  // namespace

struct loom_trtllm_executor {
  std::unique_ptr<tle::Executor> executor;
  loom_trtllm::ParallelSetup parallel;  // what create was given (loom_trtllm_info_get)
  bool guided = false;        // created with a guided decoding config
  std::mutex mu;              // guards everything below; never held across awaitResponses
  std::mutex shutdown_mu;     // serialises shutdown
  bool shut_down = false;     // enqueue refuses
  bool stopped = false;       // every final response is queued in `pending`
  std::unordered_set<uint64_t> live;       // enqueued, final response not yet seen
  std::unordered_set<uint64_t> cancelled;  // cancel asked, final response not yet seen
  std::deque<OwnedResponse> pending;       // responses made by shutdown, handed out by await
  loom_trtllm_stats stats{};
  int32_t max_batch = 0;

  // Convert one TensorRT-LLM response; called with mu held.
  OwnedResponse convert_locked(const tle::Response& r) {
    OwnedResponse o;
    o.request_id = r.getRequestId();
    if (auto cid = r.getClientId()) {
      o.has_client_id = true;
      o.client_id = *cid;
    }
    if (r.hasError()) {
      o.is_final = true;
      o.reason = LOOM_TRTLLM_FINISH_ERROR;
      o.error = r.getErrorMsg();
      o.error_kind = classify(o.error);
    } else {
      auto const& res = r.getResult();  // by value in 0.11, by const& later: both bind here
      o.is_final = res.isFinal;
      if (!res.outputTokenIds.empty()) o.tokens.assign(res.outputTokenIds[0].begin(), res.outputTokenIds[0].end());
      if (res.logProbs && !res.logProbs->empty()) {
        // Beam 0; keep the last num_tokens values, whether a release sends the new ones or all of them.
        auto const& lp = (*res.logProbs)[0];
        const size_t n = std::min(lp.size(), o.tokens.size());
        o.log_probs.assign(lp.end() - long(n), lp.end());
        o.has_log_probs = n == o.tokens.size();
      }
      if (o.is_final) {
        o.reason = res.finishReasons.empty() ? LOOM_TRTLLM_FINISH_NOT_FINISHED : finish_of(res.finishReasons[0]);
        if (o.reason == LOOM_TRTLLM_FINISH_NOT_FINISHED && cancelled.count(o.request_id))
          o.reason = LOOM_TRTLLM_FINISH_CANCELLED;
      }
    }
    if (o.is_final) {
      live.erase(o.request_id);
      cancelled.erase(o.request_id);
    }
    return o;
  }
};

extern "C" {

void loom_trtllm_get_capabilities(loom_trtllm_capabilities* out) {
  out->abi_version = LOOM_TRTLLM_ABI_VERSION;
  out->impl = "tensorrt-llm";
  out->version = tle::version();
  out->guided_decoding = LOOM_TRTLLM_HAS_GUIDED_DECODING;
  out->medusa = 1;
  // The libtensorrt_llm.so this addon resolved tle::version from: executorWorker is installed beside it.
  Dl_info where{};
  out->library_path = dladdr(reinterpret_cast<void*>(&tle::version), &where) != 0 ? where.dli_fname : nullptr;
}

loom_trtllm_status loom_trtllm_create(const loom_trtllm_executor_options* options, loom_trtllm_executor** out,
                                      char* err, size_t err_size) {
  if (!options || !out) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "options and out are required");
  const std::string bad = loom_trtllm::check_options(*options);
  if (!bad.empty()) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, bad);
  try {
    initTrtLlmPlugins(nullptr, "tensorrt_llm");
    auto ex = std::make_unique<loom_trtllm_executor>();
    tle::ExecutorConfig cfg = executor_config(*options);
    ex->guided = LOOM_TRTLLM_HAS_GUIDED_DECODING && options->guided_vocab_size > 0;
    ex->max_batch = options->max_batch_size;
    ex->parallel = loom_trtllm::parallel_setup(*options);
    ex->executor = std::make_unique<tle::Executor>(std::filesystem::path(options->engine_dir),
                                                   tle::ModelType::kDECODER_ONLY, cfg);
    *out = ex.release();
    return LOOM_TRTLLM_OK;
  } catch (const std::exception& e) {
    return fail(LOOM_TRTLLM_ENGINE_INVALID, err, err_size,
                std::string("TensorRT-LLM could not load the engine in ") + options->engine_dir + ": " + e.what());
  }
}

loom_trtllm_status loom_trtllm_enqueue(loom_trtllm_executor* ex, const loom_trtllm_request* request,
                                       uint64_t* request_id, char* err, size_t err_size) {
  if (!ex || !request || !request_id)
    return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor, request and request_id are required");
  const std::string bad = loom_trtllm::check_request(*request);
  if (!bad.empty()) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, bad);
  if (request->guided_json_schema && !ex->guided)
    return fail(LOOM_TRTLLM_UNSUPPORTED, err, err_size,
                LOOM_TRTLLM_HAS_GUIDED_DECODING
                    ? "guided decoding needs the executor to be created with the tokenizer's vocabulary (guidedDecoding)"
                    : "this TensorRT-LLM release has no guided decoding");
  try {
    tle::Request req = to_request(*request);
    // mu is held across enqueueRequest so the id is in `live` before await can see its responses.
    std::lock_guard<std::mutex> lock(ex->mu);
    if (ex->shut_down) return fail(LOOM_TRTLLM_SHUT_DOWN, err, err_size, "the executor was shut down; no new requests");
    const tle::IdType id = ex->executor->enqueueRequest(req);
    ex->live.insert(id);
    *request_id = id;
    return LOOM_TRTLLM_OK;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    // maxQueueSize overflow is reported as an exception from enqueueRequest.
    if (what.find("queue") != std::string::npos && what.find("full") != std::string::npos)
      return fail(LOOM_TRTLLM_QUEUE_FULL, err, err_size, what);
    return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "TensorRT-LLM refused the request: " + what);
  }
}

loom_trtllm_status loom_trtllm_await(loom_trtllm_executor* ex, int32_t timeout_ms, loom_trtllm_responses** out,
                                     char* err, size_t err_size) {
  if (!ex || !out) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor and out are required");
  std::vector<OwnedResponse> owned;
  {
    std::lock_guard<std::mutex> lock(ex->mu);
    if (ex->stopped) {
      owned.assign(std::make_move_iterator(ex->pending.begin()), std::make_move_iterator(ex->pending.end()));
      ex->pending.clear();
      *out = make_batch(std::move(owned));
      if ((*out)->count == 0) return fail(LOOM_TRTLLM_SHUT_DOWN, err, err_size, "the executor was shut down");
      return LOOM_TRTLLM_OK;
    }
  }
  try {
    std::vector<tle::Response> got = ex->executor->awaitResponses(std::chrono::milliseconds(std::max(0, timeout_ms)));
    std::lock_guard<std::mutex> lock(ex->mu);
    owned.reserve(got.size());
    for (const tle::Response& r : got) owned.push_back(ex->convert_locked(r));
    *out = make_batch(std::move(owned));
    return LOOM_TRTLLM_OK;
  } catch (const std::exception& e) {
    *out = make_batch({});
    return fail(LOOM_TRTLLM_INTERNAL, err, err_size, std::string("awaitResponses failed: ") + e.what());
  }
}

loom_trtllm_status loom_trtllm_cancel(loom_trtllm_executor* ex, uint64_t request_id, char* err, size_t err_size) {
  if (!ex) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor is required");
  std::lock_guard<std::mutex> lock(ex->mu);
  if (ex->shut_down || !ex->live.count(request_id)) return LOOM_TRTLLM_OK;  // finished or unknown: nothing to do
  try {
    ex->cancelled.insert(request_id);
    ex->executor->cancelRequest(request_id);
    return LOOM_TRTLLM_OK;
  } catch (const std::exception& e) {
    return fail(LOOM_TRTLLM_INTERNAL, err, err_size, std::string("cancelRequest failed: ") + e.what());
  }
}

loom_trtllm_status loom_trtllm_stats_get(loom_trtllm_executor* ex, loom_trtllm_stats* out, char* err,
                                         size_t err_size) {
  if (!ex || !out) return fail(LOOM_TRTLLM_INVALID_ARGUMENT, err, err_size, "executor is required");
  std::lock_guard<std::mutex> lock(ex->mu);
  if (!ex->shut_down) {
    try {
      // Stats since the last call; keep the newest so a quiet period repeats the last figures.
      std::deque<tle::IterationStats> all = ex->executor->getLatestIterationStats();
      if (!all.empty()) {
        const tle::IterationStats& it = all.back();
        loom_trtllm_stats s{};
        s.iteration = uint64_t(it.iter);
        s.active_requests = it.numActiveRequests;
        s.queued_requests = it.numQueuedRequests;
        s.max_active_requests = it.maxNumActiveRequests;
        s.kv_blocks_max = s.kv_blocks_free = s.kv_blocks_used = -1;
        s.kv_tokens_per_block = -1;
        if (it.kvCacheStats) {
          s.kv_blocks_max = it.kvCacheStats->maxNumBlocks;
          s.kv_blocks_free = it.kvCacheStats->freeNumBlocks;
          s.kv_blocks_used = it.kvCacheStats->usedNumBlocks;
          s.kv_tokens_per_block = it.kvCacheStats->tokensPerBlock;
        }
        s.iteration_latency_ms = it.iterLatencyMS;
        ex->stats = s;
      } else if (ex->stats.iteration == 0) {
        ex->stats.kv_blocks_max = ex->stats.kv_blocks_free = ex->stats.kv_blocks_used = -1;
        ex->stats.kv_tokens_per_block = -1;
        ex->stats.max_active_requests = ex->max_batch;
      }
    } catch (const std::exception& e) {
      return fail(LOOM_TRTLLM_INTERNAL, err, err_size, std::string("getLatestIterationStats failed: ") + e.what());
    }
  }
  *out = ex->stats;
  // The PEFT cache's occupancy is not in IterationStats.
  out->lora_tasks_cached = -1;
  out->lora_cache_module_layers_used = -1;
  out->lora_cache_module_layers_total = -1;
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
  std::string failure;
  std::vector<tle::Response> last;
  try {
    ex->executor->shutdown();  // blocks until its threads stop
  } catch (const std::exception& e) {
    failure = e.what();
  }
  try {
    // Responses produced before it stopped but not awaited yet; a release that refuses this after
    // shutdown throws, and those requests get the shutdown error below instead.
    last = ex->executor->awaitResponses(kDrainTimeout);
  } catch (const std::exception&) {
    last.clear();
  }
  std::lock_guard<std::mutex> lock(ex->mu);
  for (const tle::Response& r : last) ex->pending.push_back(ex->convert_locked(r));
  for (uint64_t id : ex->live) {
    OwnedResponse o;
    o.request_id = id;
    o.is_final = true;
    o.reason = LOOM_TRTLLM_FINISH_ERROR;
    o.error_kind = LOOM_TRTLLM_ERROR_SHUT_DOWN;
    o.error = "the executor shut down before the request finished";
    ex->pending.push_back(std::move(o));
  }
  ex->live.clear();
  ex->cancelled.clear();
  ex->stopped = true;
  if (!failure.empty()) return fail(LOOM_TRTLLM_INTERNAL, err, err_size, "Executor::shutdown failed: " + failure);
  return LOOM_TRTLLM_OK;
}

void loom_trtllm_destroy(loom_trtllm_executor* ex) {
  if (!ex) return;
  loom_trtllm_shutdown(ex, nullptr, 0);
  delete ex;
}

}  // extern "C"
