// Argument checks shared by both implementations of loom-trtllm.h. They run on the caller's thread
// before anything is queued, so a malformed request fails at enqueue with a message that names the
// field, its limit and the value, instead of as a late error response from deep inside the executor.
#include "request-check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace loom_trtllm {

namespace {

// TensorRT-LLM's LoraModule::ModuleType ids run 0 (attn_qkv) .. 21 (shared_expert_gate).
constexpr int32_t kMaxLoraModuleId = 21;

std::string shape_text(const int64_t* shape, size_t rank) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < rank; i++) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

// Checks one ABI word list: count words, each at least one token long, all token ids >= 0.
std::string check_words(const char* field, const int32_t* tokens, const int32_t* lengths, size_t count) {
  if (count == 0) return "";
  if (!lengths) return std::string(field) + ": lengths are required when the count is > 0";
  for (size_t i = 0; i < count; i++)
    if (lengths[i] < 1)
      return std::string(field) + "[" + std::to_string(i) + "]: a word needs at least 1 token; got length " +
             std::to_string(lengths[i]);
  if (!tokens) return std::string(field) + ": tokens are required when the count is > 0";
  size_t at = 0;
  for (size_t i = 0; i < count; i++) {
    for (int32_t j = 0; j < lengths[i]; j++, at++)
      if (tokens[at] < 0)
        return std::string(field) + "[" + std::to_string(i) + "]: token ids must be >= 0; got " +
               std::to_string(tokens[at]);
  }
  return "";
}

int32_t world_of(const loom_trtllm_executor_options& o) {
  return (o.tensor_parallel > 1 ? o.tensor_parallel : 1) * (o.pipeline_parallel > 1 ? o.pipeline_parallel : 1);
}

loom_trtllm_comm_mode mode_of(const loom_trtllm_executor_options& o) {
  if (o.comm_mode != LOOM_TRTLLM_COMM_AUTO) return o.comm_mode;
  return world_of(o) > 1 ? LOOM_TRTLLM_COMM_ORCHESTRATOR : LOOM_TRTLLM_COMM_SINGLE;
}

// Orchestrator mode hands worker_path to MPI_Comm_spawn on every rank start; a wrong path fails there
// deep inside MPI (often aborting the process), so both implementations refuse it up front.
std::string check_parallel(const loom_trtllm_executor_options& o) {
  if (o.tensor_parallel < 0 || o.pipeline_parallel < 0) return "tensor_parallel/pipeline_parallel: must be >= 0";
  if (o.comm_mode < LOOM_TRTLLM_COMM_AUTO || o.comm_mode > LOOM_TRTLLM_COMM_ORCHESTRATOR)
    return "comm_mode: unknown value " + std::to_string(int(o.comm_mode));
  const int32_t world = world_of(o);
  if (o.num_device_ids > 0 && !o.device_ids) return "device_ids: required when num_device_ids > 0";
  for (size_t i = 0; i < o.num_device_ids; i++)
    if (o.device_ids[i] < 0) return "device_ids[" + std::to_string(i) + "]: must be >= 0; got " + std::to_string(o.device_ids[i]);
  if (o.num_device_ids > 0 && o.num_device_ids != size_t(world))
    return "device_ids: one per rank is needed (tensor_parallel * pipeline_parallel = " + std::to_string(world) +
           "); got " + std::to_string(o.num_device_ids);
  const loom_trtllm_comm_mode mode = mode_of(o);
  if (mode == LOOM_TRTLLM_COMM_SINGLE && world > 1)
    return "comm_mode: SINGLE runs one process, but tensor_parallel * pipeline_parallel = " + std::to_string(world) +
           " needs ORCHESTRATOR (or LEADER under mpirun)";
  if (mode != LOOM_TRTLLM_COMM_ORCHESTRATOR) return "";
  const std::string ranks = " (orchestrator mode spawns " + std::to_string(world) + " executorWorker process" +
                            (world == 1 ? "" : "es") + ")";
  if (!o.worker_path || !*o.worker_path) return "worker_path: TensorRT-LLM's executorWorker is required" + ranks;
  struct stat st {};
  if (stat(o.worker_path, &st) != 0) return std::string("worker_path: ") + o.worker_path + " does not exist" + ranks;
  if (!S_ISREG(st.st_mode) || access(o.worker_path, X_OK) != 0)
    return std::string("worker_path: ") + o.worker_path + " is not an executable file" + ranks;
  return "";
}

std::string check_lora(const loom_trtllm_request& r) {
  if (!r.has_lora) return "";
  if (!r.lora_weights) {
    // Id-only: the executor must have the task cached. Config alone makes no sense.
    if (r.lora_config) return "lora: a config tensor was given without weights; send both or neither";
    return "";
  }
  const size_t elem = dtype_size(r.lora_weights_dtype);
  if (elem == 0) return "lora.weights: unknown dtype code " + std::to_string(int(r.lora_weights_dtype));
  const int64_t* ws = r.lora_weights_shape;  // [moduleLayers, maxRow]
  const int64_t* cs = r.lora_config_shape;   // [moduleLayers, 3 | 4]
  if (ws[0] < 1 || ws[1] < 1)
    return std::string("lora.weights: expected ") + dtype_name(r.lora_weights_dtype) +
           " [moduleLayers >= 1, maxRow >= 1]; got " + shape_text(ws, 2);
  const uint64_t want = uint64_t(ws[0]) * uint64_t(ws[1]) * elem;
  if (r.lora_weights_bytes != want)
    return std::string("lora.weights: ") + dtype_name(r.lora_weights_dtype) + " " + shape_text(ws, 2) + " needs " +
           std::to_string(want) + " bytes; got " + std::to_string(r.lora_weights_bytes);
  if (!r.lora_config) return "lora.config: int32 [" + std::to_string(ws[0]) + ", 3] is required with weights";
  if (cs[0] != ws[0] || (cs[1] != 3 && cs[1] != 4))
    return "lora.config: expected int32 [" + std::to_string(ws[0]) + ", 3] (or [" + std::to_string(ws[0]) +
           ", 4] with is_dora) to match weights " + shape_text(ws, 2) + "; got int32 " + shape_text(cs, 2);
  for (int64_t i = 0; i < cs[0]; i++) {
    const int32_t* row = r.lora_config + i * cs[1];  // (module id, layer, rank[, is_dora])
    const std::string at = "lora.config[" + std::to_string(i) + "]";
    if (row[0] < 0 || row[0] > kMaxLoraModuleId)
      return at + ": module id must be in [0, " + std::to_string(kMaxLoraModuleId) + "]; got " +
             std::to_string(row[0]);
    if (row[1] < 0) return at + ": layer must be >= 0; got " + std::to_string(row[1]);
    if (row[2] < 1) return at + ": rank (adapter size) must be > 0; got " + std::to_string(row[2]);
    if (cs[1] == 4 && row[3] != 0 && row[3] != 1) return at + ": is_dora must be 0 or 1; got " + std::to_string(row[3]);
  }
  return "";
}

}  // namespace

loom_trtllm_status fail(loom_trtllm_status st, char* err, size_t err_size, const std::string& msg) {
  if (err && err_size > 0) {
    const size_t n = msg.size() < err_size - 1 ? msg.size() : err_size - 1;
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
  }
  return st;
}

size_t dtype_size(int dtype) {
  switch (dtype) {
    case LOOM_TRTLLM_DTYPE_FLOAT16:
    case LOOM_TRTLLM_DTYPE_BFLOAT16: return 2;
    case LOOM_TRTLLM_DTYPE_FLOAT32: return 4;
    default: return 0;
  }
}

const char* dtype_name(int dtype) {
  switch (dtype) {
    case LOOM_TRTLLM_DTYPE_FLOAT16: return "float16";
    case LOOM_TRTLLM_DTYPE_BFLOAT16: return "bfloat16";
    case LOOM_TRTLLM_DTYPE_FLOAT32: return "float32";
    default: return "unknown";
  }
}

std::string check_request(const loom_trtllm_request& r) {
  if (!r.input_ids || r.num_input_ids == 0) return "input_ids: at least 1 token is required; got 0";
  for (size_t i = 0; i < r.num_input_ids; i++)
    if (r.input_ids[i] < 0)
      return "input_ids[" + std::to_string(i) + "]: token ids must be >= 0; got " + std::to_string(r.input_ids[i]);
  if (r.max_tokens < 1) return "max_tokens: must be >= 1; got " + std::to_string(r.max_tokens);
  if (r.top_k < 0) return "top_k: must be >= 0 (0: off); got " + std::to_string(r.top_k);
  if (!(r.top_p >= 0.0f && r.top_p <= 1.0f)) return "top_p: must be in [0, 1] (0: off); got " + std::to_string(r.top_p);
  if (!(r.temperature > 0.0f) || !std::isfinite(r.temperature))
    return "temperature: must be a finite number > 0 (greedy is top_k 1); got " + std::to_string(r.temperature);
  if (!(r.repetition_penalty > 0.0f) || !std::isfinite(r.repetition_penalty))
    return "repetition_penalty: must be a finite number > 0 (1: off); got " + std::to_string(r.repetition_penalty);
  if (!std::isfinite(r.presence_penalty) || !std::isfinite(r.frequency_penalty))
    return "presence_penalty/frequency_penalty: must be finite";
  if (r.min_tokens < 0) return "min_tokens: must be >= 0; got " + std::to_string(r.min_tokens);
  if (r.end_id < -1) return "end_id: must be >= 0, or -1 for none; got " + std::to_string(r.end_id);
  if (r.pad_id < -1) return "pad_id: must be >= 0, or -1 for none; got " + std::to_string(r.pad_id);
  std::string e = check_words("stop_words", r.stop_words_tokens, r.stop_words_lengths, r.num_stop_words);
  if (e.empty()) e = check_words("bad_words", r.bad_words_tokens, r.bad_words_lengths, r.num_bad_words);
  if (e.empty()) e = check_lora(r);
  return e;
}

std::string check_options(const loom_trtllm_executor_options& o) {
  if (!o.engine_dir || !*o.engine_dir) return "engine_dir: a directory is required";
  if (o.max_batch_size < 0) return "max_batch_size: must be >= 0 (0: the engine's); got " + std::to_string(o.max_batch_size);
  if (o.max_num_tokens < 0) return "max_num_tokens: must be >= 0; got " + std::to_string(o.max_num_tokens);
  if (o.max_queue_size < 0) return "max_queue_size: must be >= 0 (0: unbounded); got " + std::to_string(o.max_queue_size);
  if (!(o.kv_cache_free_gpu_memory_fraction >= 0.0f && o.kv_cache_free_gpu_memory_fraction <= 1.0f))
    return "kv_cache_free_gpu_memory_fraction: must be in (0, 1] (0: 0.9); got " +
           std::to_string(o.kv_cache_free_gpu_memory_fraction);
  if (o.kv_cache_max_tokens < 0) return "kv_cache_max_tokens: must be >= 0; got " + std::to_string(o.kv_cache_max_tokens);
  if (o.lora_cache_host_module_layers < 0 || o.lora_cache_device_module_layers < 0)
    return "lora_cache_*_module_layers: must be >= 0";
  if (!(o.lora_cache_device_percent >= 0.0f && o.lora_cache_device_percent <= 1.0f))
    return "lora_cache_device_percent: must be in (0, 1] (0: default); got " + std::to_string(o.lora_cache_device_percent);
  if (o.medusa_num_choices > 0) {
    if (!o.medusa_choices || !o.medusa_choice_offsets) return "medusa_choices: tokens and offsets are required";
    if (o.medusa_choice_offsets[0] != 0) return "medusa_choice_offsets[0]: must be 0";
    for (size_t i = 0; i < o.medusa_num_choices; i++) {
      const int32_t a = o.medusa_choice_offsets[i], b = o.medusa_choice_offsets[i + 1];
      if (b <= a)
        return "medusa_choices[" + std::to_string(i) + "]: a path needs at least 1 entry; got offsets " +
               std::to_string(a) + ".." + std::to_string(b);
      for (int32_t j = a; j < b; j++)
        if (o.medusa_choices[j] < 0)
          return "medusa_choices[" + std::to_string(i) + "]: entries must be >= 0; got " +
                 std::to_string(o.medusa_choices[j]);
    }
  }
  if (const std::string e = check_parallel(o); !e.empty()) return e;
  if (o.iter_stats_max_iterations < 0) return "iter_stats_max_iterations: must be >= 0";
  if (o.guided_vocab_size > 0 && !o.guided_vocab) return "guided_vocab: required when guided_vocab_size > 0";
  for (size_t i = 0; i < o.guided_vocab_size; i++)
    if (!o.guided_vocab[i]) return "guided_vocab[" + std::to_string(i) + "]: NULL";
  if (o.num_guided_stop_token_ids > 0 && !o.guided_stop_token_ids)
    return "guided_stop_token_ids: required when num_guided_stop_token_ids > 0";
  if (o.fake_step_us < 0 || o.fake_tokens_per_step < 0 || o.fake_vocab_size < 0)
    return "fake_step_us/fake_tokens_per_step/fake_vocab_size: must be >= 0";
  return "";
}

std::vector<std::vector<int32_t>> word_list(const int32_t* tokens, const int32_t* lengths, size_t count) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(count);
  size_t at = 0;
  for (size_t i = 0; i < count; i++) {
    out.emplace_back(tokens + at, tokens + at + lengths[i]);
    at += size_t(lengths[i]);
  }
  return out;
}

std::vector<std::vector<int32_t>> medusa_paths(const loom_trtllm_executor_options& o) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < o.medusa_num_choices; i++)
    out.emplace_back(o.medusa_choices + o.medusa_choice_offsets[i], o.medusa_choices + o.medusa_choice_offsets[i + 1]);
  return out;
}

ParallelSetup parallel_setup(const loom_trtllm_executor_options& o) {
  ParallelSetup p;
  p.mode = mode_of(o);
  p.world = world_of(o);
  if (p.mode == LOOM_TRTLLM_COMM_ORCHESTRATOR && o.worker_path) p.worker_path = o.worker_path;
  if (o.num_device_ids > 0) p.device_ids.assign(o.device_ids, o.device_ids + o.num_device_ids);
  return p;
}

void ParallelSetup::fill(loom_trtllm_executor_info* out) const {
  out->comm_mode = mode;
  out->world_size = world;
  out->spawned_workers = mode == LOOM_TRTLLM_COMM_ORCHESTRATOR ? world : 0;
  out->worker_path = mode == LOOM_TRTLLM_COMM_ORCHESTRATOR ? worker_path.c_str() : nullptr;
  out->device_ids = device_ids.empty() ? nullptr : device_ids.data();
  out->num_device_ids = device_ids.size();
}

std::string lora_not_cached_message(uint64_t task_id) {
  return "LoRA task " + std::to_string(task_id) + " not found in cache. Please send LoRA weights with request";
}

}  // namespace loom_trtllm
