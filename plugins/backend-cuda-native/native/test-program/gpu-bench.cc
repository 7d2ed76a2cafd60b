// The GPU benchmark (issue 15, point 1). One run, one device, in this order (cheap and
// model-free figures first, so a first GPU run that faults later still reports them):
//   1. read bandwidth: the cuda probe (gpu-bench-cuda.cu) or the cpu one (cpu/read-bandwidth),
//      measured again at the end; the best pass is the decode roofline's denominator;
//   2. the LoRA op (Device::lora_apply, one module, hidden -> hidden, rank 16, bf16 adapters) at
//      batch 1 and at the largest batch with a distinct adapter per row: "cold" calls cycle
//      through a pool of adapters larger than the GPU's L2 (as in a decode step, where 16 GB of
//      weights pass between two reads of an adapter), "L2-hot" calls reuse the same ones;
//   2b. Device::matmul alone on the gate/up and down shapes at batch 1, 8 and the largest batch
//      (GEMV, GEMV, split-K tensor-core GEMM), beside the bytes' roofline;
//   3. a random bf16 model of the shape (Llama-3-8B: hidden 4096, 32 layers, 32/8 heads, head
//      dim 128, intermediate 14336, vocab 128256, untied LM head) written as a safetensors file
//      and loaded through LlamaModel::load (on cuda: every weight uploaded, as in serving), plus
//      one LoRA adapter per row of the largest batch (rank 16 on all 7 modules, every layer);
//   4. decode steps at each batch size, every row with `context` tokens cached, in four variants:
//      base rows sampled greedily; base rows in a sampling mix (even rows temperature 0.8 + top-p
//      0.95 with a seeded stream, odd rows greedy); the mix with one shared adapter; the mix with
//      a distinct adapter per row. Sampling runs on the device; a step ends in
//      Device::synchronize (LlamaModel::step downloads the sampled ids), so its wall time is the
//      device's. Warm-up steps first, then the median of N timed steps;
//   5. prefill: one long prompt, and several short prompts in one step, each sampling its last
//      position greedily; tokens/s and TFLOP/s;
//   6. where the time goes: batch-1 decode, the largest batch's distinct-adapter mix and the long
//      prefill again, each device op waited for alone and timed (op-timing-device.h), printed
//      after the table as each op's time per step.
// Rooflines: a decode step reads every projection and LM-head weight once, the rows' embedding
// entries, each row's K/V of `context` + 1 positions in every layer (the device's KV dtype), and
// each distinct adapter once; roofline time = those bytes / the best measured bandwidth. Prefill:
// matmul FLOPs (2 per weight per token, LM head for the sampled positions) + causal attention
// (4 D Hq per visible key) over the GPU's dense bf16 tensor-core peak. The LoRA op: its adapter,
// x and y bytes over the bandwidth.
// Shortcuts that do not change the work timed: weight values are one random 64 MB block (LM head:
// a second one, scaled so logits spread like a trained model's, which keeps top-p's candidate set
// realistic) repeated through the file, the same adapter values fill every slot (distinct memory),
// and the cached K/V are the zeros the cache starts with (attention reads them all the same); each
// decode step rewrites position `context` of its rows, so every step sees the same cache length.
#include "gpu-bench.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu/read-bandwidth.h"
#include "kernels/kernels.h"
#include "model/llama-model.h"
#include "op-timing-device.h"
#include "runtime/device-buffer.h"

namespace loom_bench {
namespace {

using loom::CudaKernelPaths;
using loom::Device;
using loom::DType;
using loom::ModelConfig;
using loom::Status;
using Clock = std::chrono::steady_clock;
using loom_test::OpTimingDevice;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- Shapes ----

struct Shape {
  std::string name;
  ModelConfig cfg;
  int context = 0;              // cached tokens of every decode row
  std::vector<int> batches;     // decode batch sizes, ascending
  int prefill_long = 0;         // one prompt of this many tokens
  int prefill_rows = 0;         // and prefill_rows prompts of prefill_short tokens in one step
  int prefill_short = 0;
  int rank = 16;                // LoRA rank of the decode adapters and the LoRA op
  int64_t lora_hidden = 0;      // the LoRA op's K = N
  int lora_pool = 0;            // adapters the cold LoRA op cycles through
  int lora_calls = 0;           // LoRA op calls per timed repetition
  int steps = 0;                // timed decode steps per row
  int64_t bandwidth_bytes = 0;  // the read probe's buffer
  bool issue_shape = false;     // the shape issue 15's absolute targets (µs, % of peak) are for
};

ModelConfig base_config(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads,
                        int64_t head_dim) {
  ModelConfig c;
  c.vocab = vocab, c.hidden = hidden, c.intermediate = inter, c.layers = layers;
  c.heads = heads, c.kv_heads = kv_heads, c.head_dim = head_dim, c.max_positions = 8192;
  // Llama 3's RoPE (theta 500000, llama3 scaling as Llama 3.1), RMSNorm eps, untied LM head.
  c.rope_theta = 500000.0;
  c.rope_scaling = loom::RopeScaling::Llama3;
  c.rope_factor = 8.0, c.rope_low_freq = 1.0, c.rope_high_freq = 4.0, c.rope_original_max = 8192.0;
  c.rms_eps = 1e-5f;
  c.tie_embeddings = false;
  return c;
}

bool make_shape(const std::string& name, Shape* s) {
  s->name = name;
  if (name == "llama3-8b") {
    s->cfg = base_config(128256, 4096, 14336, 32, 32, 8, 128);
    s->context = 512, s->batches = {1, 8, 32, 64};
    s->prefill_long = 2048, s->prefill_rows = 8, s->prefill_short = 512;
    s->lora_hidden = 4096, s->lora_pool = 1024, s->lora_calls = 200;  // pool: 256 MiB of adapters
    s->steps = 20, s->bandwidth_bytes = int64_t(2) << 30;
    s->issue_shape = true;
    return true;
  }
  if (name == "smollm2-135m") {  // the cpu benchmarks' model (npm run bench, bench:peers): its per-op breakdown
    s->cfg = base_config(49152, 576, 1536, 30, 9, 3, 64);
    s->context = 64, s->batches = {1, 8};
    s->prefill_long = 256, s->prefill_rows = 2, s->prefill_short = 64;
    s->lora_hidden = 576, s->lora_pool = 64, s->lora_calls = 50;
    s->steps = 20, s->bandwidth_bytes = int64_t(512) << 20;
    return true;
  }
  if (name == "tiny") {  // for the cpu device in npm test: the same code paths in a second
    s->cfg = base_config(2000, 256, 512, 2, 4, 2, 64);
    s->context = 32, s->batches = {1, 4};
    s->prefill_long = 64, s->prefill_rows = 4, s->prefill_short = 16;
    s->lora_hidden = 256, s->lora_pool = 64, s->lora_calls = 50;
    s->steps = 5, s->bandwidth_bytes = int64_t(64) << 20;
    return true;
  }
  return false;
}

// ---- Byte and FLOP counts (the rooflines) ----

int64_t layer_weights(const ModelConfig& c) {
  const int64_t H = c.hidden, I = c.intermediate, QD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim;
  return H * QD + 2 * H * KD + QD * H + 3 * H * I;  // q, k, v, o, gate, up, down
}

// One adapter's A and Bt elements over every layer and the 7 modules.
int64_t adapter_elements(const ModelConfig& c, int rank) {
  const int64_t H = c.hidden, I = c.intermediate, QD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim;
  const int64_t in = 5 * H + QD + I, out = QD + 2 * KD + H + 2 * I + H;  // Σ in_f, Σ out_f (q k v o gate up down)
  return c.layers * int64_t(rank) * (in + out);
}

struct DecodeBytes {
  double weights = 0, kv = 0, adapters = 0;
  double total() const { return weights + kv + adapters; }
};

DecodeBytes decode_bytes(const Shape& s, int batch, int distinct_adapters, int weight_size, int kv_size) {
  const ModelConfig& c = s.cfg;
  DecodeBytes b;
  b.weights = double(c.layers * layer_weights(c) + c.vocab * c.hidden + batch * c.hidden) * weight_size +
              double((2 * c.layers + 1) * c.hidden) * 4;  // norms, widened to f32 at load
  b.kv = double(batch) * (s.context + 1) * c.layers * 2 * c.kv_heads * c.head_dim * kv_size;
  b.adapters = double(distinct_adapters) * adapter_elements(c, s.rank) * weight_size;
  return b;
}

double prefill_flops(const ModelConfig& c, int rows, int tokens_per_row) {
  const double T = double(rows) * tokens_per_row;
  const double attn = double(rows) * c.layers * 4.0 * c.head_dim * c.heads * (double(tokens_per_row) * (tokens_per_row + 1) / 2);
  return 2.0 * T * c.layers * layer_weights(c) + attn + 2.0 * rows * c.vocab * c.hidden;
}

// Dense bf16 tensor-core peak (no sparsity) by the GPU's name: NVIDIA's datasheet figures.
struct Peak {
  double tflops = 0;
  std::string source;
};

Peak peak_for(const std::string& gpu, double override_tflops) {
  if (override_tflops > 0) return {override_tflops, "--peak-tflops"};
  auto has = [&](const char* s) { return gpu.find(s) != std::string::npos; };
  if (has("H100") && has("PCIe")) return {756, "H100 PCIe datasheet"};
  if (has("H100") && has("NVL")) return {835, "H100 NVL datasheet"};
  if (has("H100") || has("H800") || has("GH200")) return {989, "H100 SXM datasheet"};
  if (has("H200")) return {989, "H200 datasheet"};
  if (has("A100") || has("A800")) return {312, "A100 datasheet"};
  if (has("L40S")) return {362, "L40S datasheet"};
  if (has("L4")) return {121, "L4 datasheet"};
  if (has("A10")) return {125, "A10 datasheet"};
  return {989, "assumed H100 SXM (unknown GPU name; --peak-tflops sets it)"};
}

// ---- The weights file ----

struct Rng {  // SplitMix64: fast, and the values only need to look like weights
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float a) { return a * (float(next() >> 40) / float(1ull << 23) - 1.0f); }
};

std::vector<uint16_t> random_bf16(size_t n, float scale, uint64_t seed) {
  Rng rng{seed};
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = loom::f32_to_bf16(rng.uniform(scale));
  return v;
}

enum class Fill { kWeight, kHead, kOnes };
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  Fill fill;
};

std::vector<TensorSpec> tensor_specs(const ModelConfig& c) {
  const int64_t H = c.hidden, I = c.intermediate, QD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim;
  std::vector<TensorSpec> ts = {{"model.embed_tokens.weight", {c.vocab, H}, Fill::kWeight},
                                {"lm_head.weight", {c.vocab, H}, Fill::kHead},
                                {"model.norm.weight", {H}, Fill::kOnes}};
  for (int64_t l = 0; l < c.layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back({p + "self_attn.q_proj.weight", {QD, H}, Fill::kWeight});
    ts.push_back({p + "self_attn.k_proj.weight", {KD, H}, Fill::kWeight});
    ts.push_back({p + "self_attn.v_proj.weight", {KD, H}, Fill::kWeight});
    ts.push_back({p + "self_attn.o_proj.weight", {H, QD}, Fill::kWeight});
    ts.push_back({p + "mlp.gate_proj.weight", {I, H}, Fill::kWeight});
    ts.push_back({p + "mlp.up_proj.weight", {I, H}, Fill::kWeight});
    ts.push_back({p + "mlp.down_proj.weight", {H, I}, Fill::kWeight});
    ts.push_back({p + "input_layernorm.weight", {H}, Fill::kOnes});
    ts.push_back({p + "post_attention_layernorm.weight", {H}, Fill::kOnes});
  }
  return ts;
}

// Where the file goes: --bench-dir, else /dev/shm when it has room (memory-backed, so writing and
// mapping 16 GB takes seconds), else TMPDIR or /tmp. A fresh folder inside it.
std::string weights_dir(const std::string& requested, int64_t bytes) {
  std::string parent = requested;
  if (parent.empty()) {
    struct statvfs fs;
    if (statvfs("/dev/shm", &fs) == 0 && double(fs.f_bavail) * double(fs.f_frsize) > double(bytes) + 4e9)
      parent = "/dev/shm";
  }
  if (parent.empty()) {
    const char* t = std::getenv("TMPDIR");
    parent = t && *t ? t : "/tmp";
  }
  std::string tmpl = parent + "/loom-gpu-bench.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  return mkdtemp(buf.data()) ? std::string(buf.data()) : std::string();
}

// Writes every tensor as BF16 into `path` (safetensors: 8-byte header length, JSON header padded
// so the data starts 64-byte aligned, data) and fills `table` for LlamaModel::load. Weights
// cycle through `block` (projections, embedding) or `head` (LM head); norms are 1.
Status write_weights(const std::string& path, const std::vector<TensorSpec>& ts, const std::vector<uint16_t>& block,
                     const std::vector<uint16_t>& head, std::vector<loom::TensorDesc>* table) {
  std::string header = "{";
  int64_t off = 0;
  std::vector<int64_t> counts;
  for (size_t i = 0; i < ts.size(); i++) {
    int64_t n = 1;
    for (int64_t d : ts[i].shape) n *= d;
    counts.push_back(n);
    header += (i ? "," : "") + std::string("\"") + ts[i].name + "\":{\"dtype\":\"BF16\",\"shape\":[";
    for (size_t d = 0; d < ts[i].shape.size(); d++) header += (d ? "," : "") + std::to_string(ts[i].shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + 2 * n) + "]}";
    off += 2 * n;
  }
  header += "}";
  while ((8 + header.size()) % 64 != 0) header += ' ';
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::Error("native_error", "cannot write " + path);
  const uint64_t len = header.size();
  bool ok = std::fwrite(&len, 8, 1, f) == 1 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  int64_t at = 8 + int64_t(header.size());
  const std::vector<uint16_t> ones(size_t(std::max<int64_t>(1, ts[0].shape[1])), loom::f32_to_bf16(1.0f));
  size_t pos = 0;  // where the next weight tensor starts in the block: consecutive tensors differ
  for (size_t i = 0; i < ts.size() && ok; i++) {
    const int64_t n = counts[i];
    table->push_back({ts[i].name, 0, at, 2 * n, DType::BF16, ts[i].shape});
    at += 2 * n;
    if (ts[i].fill == Fill::kOnes) {
      ok = std::fwrite(ones.data(), 2, size_t(n), f) == size_t(n);
      continue;
    }
    const std::vector<uint16_t>& src = ts[i].fill == Fill::kHead ? head : block;
    for (int64_t done = 0; done < n && ok;) {
      pos %= src.size();
      const size_t chunk = size_t(std::min<int64_t>(n - done, int64_t(src.size() - pos)));
      ok = std::fwrite(src.data() + pos, 2, chunk, f) == chunk;
      done += int64_t(chunk), pos += chunk;
    }
    pos += 4099;  // an odd skip, so tensors of equal size do not start on the same values
  }
  ok = std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::Error("native_error", "short write to " + path + " (disk full?)");
}

// ---- The table ----

struct Row {
  std::string figure, time, rate, work, roofline, share, n, target;
};

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A time with a unit that keeps 3-4 significant digits.
std::string fmt_time(double s) {
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.3f ms", s * 1e3);
  return fmt("%.2f µs", s * 1e6);
}

std::string fmt_bytes(double b) {
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.2f MB", b / 1e6);
  return fmt("%.1f KB", b / 1e3);
}

std::string fmt_rate(double bytes_per_s) {
  if (bytes_per_s >= 1e12) return fmt("%.2f TB/s", bytes_per_s / 1e12);
  return fmt("%.1f GB/s", bytes_per_s / 1e9);
}

std::string fmt_flops(double f) {
  if (f >= 1e12) return fmt("%.2f TFLOP", f / 1e12);
  return fmt("%.2f GFLOP", f / 1e9);
}

std::string verdict(bool pass) { return pass ? "PASS" : "FAIL"; }

// ---- Timing ----

struct Timing {
  double median = 0, best = 0;  // seconds per step / call
  int n = 0;
  std::string error;            // set when a step failed or the row was skipped
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The soft deadline of --bench-seconds: a row that would start past it is skipped.
struct Budget {
  Clock::time_point deadline;
  bool limited = false;
  bool over() const { return limited && Clock::now() > deadline; }
};

// `warm` untimed runs of `once`, then timed ones: at most `max_n`, fewer when a run is slow (the
// row stops adding runs after ~`row_seconds`, at least 3), and only one once the budget is over.
template <typename F>
Timing time_runs(F once, int warm, int max_n, double row_seconds, const Budget& budget) {
  Timing t;
  if (budget.over()) return t.error = "skipped: past the --bench-seconds budget", t;
  for (int i = 0; i < warm; i++) {
    const Status st = once();
    if (!st.ok()) return t.error = st.code + ": " + st.message, t;
  }
  std::vector<double> times;
  const auto row_start = Clock::now();
  while (int(times.size()) < max_n) {
    const auto t0 = Clock::now();
    const Status st = once();
    if (!st.ok()) return t.error = st.code + ": " + st.message, t;
    times.push_back(seconds_since(t0));
    if (budget.over() || (times.size() >= 3 && seconds_since(row_start) > row_seconds)) break;
  }
  t.n = int(times.size());
  t.median = median_of(times);
  t.best = *std::min_element(times.begin(), times.end());
  return t;
}

// ---- Step inputs ----

// A step's host inputs and outputs, kept together so the StepInput's pointers stay valid.
struct StepData {
  std::vector<int32_t> tokens, positions, blocks;
  std::vector<int32_t> out_tokens, walk_ends;
  std::vector<float> out_logprobs;
  std::vector<int> sampled_rows;  // rows that draw from their stream (their `draws` advance)
  loom::StepInput in;
};

enum class Adapters { kBase, kOne, kDistinct };
const char* adapters_name(Adapters a) { return a == Adapters::kBase ? "base" : a == Adapters::kOne ? "one adapter" : "distinct adapters"; }

// A decode row's and a prefill row's names, as the table, the kernel-path rows and the breakdown
// print them.
std::string decode_figure(int batch, Adapters a, bool mix) {
  return "decode B=" + std::to_string(batch) + " " + adapters_name(a) + (mix ? ", sampled mix" : ", greedy");
}
std::string prefill_figure(int rows, int n) { return "prefill " + std::to_string(rows) + "x" + std::to_string(n); }

// `rows` rows of `n` new tokens after `cache_len` cached ones; row r's blocks start at block
// r * blocks_per_row. Every row samples its last position: greedy, or (mix) even rows at
// temperature 0.8 + top-p 0.95 with their own seeded stream.
void build_step(const Shape& s, int rows, int n, int cache_len, int blocks_per_row, Adapters adapters, bool mix,
                uint64_t seed, StepData* d) {
  const int bs = 16;
  Rng rng{seed};
  d->tokens.clear(), d->positions.clear(), d->blocks.clear(), d->sampled_rows.clear();
  const int need = (cache_len + n + bs - 1) / bs;
  for (int r = 0; r < rows; r++) {
    for (int i = 0; i < n; i++) {
      d->tokens.push_back(int32_t(rng.next() % uint64_t(s.cfg.vocab)));
      d->positions.push_back(cache_len + i);
    }
    for (int b = 0; b < need; b++) d->blocks.push_back(r * blocks_per_row + b);
  }
  loom::StepInput& in = d->in;
  in = loom::StepInput{};
  in.samplings.resize(size_t(rows));
  for (int r = 0; r < rows; r++) {
    loom::SampleParams& p = in.samplings[size_t(r)].base;
    if (mix && r % 2 == 0) {
      p.temperature = 0.8, p.top_p = 0.95, p.seed = seed * 1000 + uint64_t(r);
      d->sampled_rows.push_back(r);
    }
    loom::StepRowDesc row{};
    row.tok_start = r * n, row.n = n, row.cache_len = cache_len;
    row.lora_slot = adapters == Adapters::kBase ? -1 : adapters == Adapters::kOne ? 0 : r;
    row.medusa_slot = -1, row.medusa_heads = 0;
    row.block_table = d->blocks.data() + size_t(r) * size_t(need);
    row.num_blocks = need;
    row.tree_mask = nullptr;
    row.sampling = &in.samplings[size_t(r)];
    in.rows.push_back(row);
  }
  in.tokens = d->tokens.data(), in.positions = d->positions.data(), in.num_tokens = rows * n;
  d->out_tokens.assign(size_t(rows), -1), d->out_logprobs.assign(size_t(rows), 0), d->walk_ends.assign(size_t(rows), 0);
  in.tokens_out = d->out_tokens.data(), in.tokens_len = rows;
  in.logprobs_out = d->out_logprobs.data();
  in.walk_ends = d->walk_ends.data(), in.walk_ends_len = rows;
}

// One step; sampled rows advance their stream's draw count as the engine would.
Status run_step(loom::LlamaModel* m, StepData* d) {
  const Status st = m->step(d->in);
  for (int r : d->sampled_rows) d->in.samplings[size_t(r)].base.draws++;
  if (st.ok())
    for (int32_t t : d->out_tokens)
      if (t < 0 || t >= m->config().vocab) return Status::Error("native_error", "a step sampled token " + std::to_string(t));
  return st;
}

// ---- The benchmark ----

class Bench {
 public:
  Bench(const BenchOptions& opt, const Shape& shape, Device* dev) : opt_(opt), s_(shape), dev_(dev), timed_(dev) {}
  int run();

 private:
  void progress(const std::string& line) {
    std::printf("[%7.1fs] %s\n", seconds_since(started_), line.c_str());
    std::fflush(stdout);
  }
  void add(Row r, bool failed = false) {
    failed_ = failed_ || failed;
    rows_.push_back(std::move(r));
  }
  void failed_row(const std::string& figure, const std::string& error) {
    progress(figure + ": " + error);
    add({figure, "-", "-", "-", "-", "-", "-", error}, error.rfind("skipped", 0) != 0);
  }
  bool measure_bandwidth(const char* when);
  void lora_op();
  void matmul_op();
  Status load_model();
  void decode();
  void prefill();
  // One decode or prefill row's steps, timed as the table times them (warm-up, count, budget).
  Timing time_decode(StepData* d) {
    return time_runs([&]() { return run_step(model_.get(), d); }, 2, s_.steps, 10.0, budget_);
  }
  Timing time_prefill(StepData* d) { return time_runs([&]() { return run_step(model_.get(), d); }, 1, 5, 20.0, budget_); }
  void breakdown();
  // One breakdown table: ops waited for alone (`marks` null) or timed by marks in the queue.
  std::string breakdown_table(const std::string& how, loom_test::QueueMarks* marks);
  void kernel_paths();
  // BenchOptions::profile: one step of each profiled row inside the profiler's range.
  int profile_steps();
  void targets();
  void print_table();

  const BenchOptions& opt_;
  const Shape& s_;
  Device* dev_;
  // The model's device: dev_, with each op timed on request (breakdown()).
  loom_test::OpTimingDevice timed_;
  std::string breakdown_;  // breakdown()'s lines, printed after the table
  bool cuda_ = false;
  GpuInfo gpu_;
  Peak peak_;
  Clock::time_point started_ = Clock::now();
  Budget budget_;
  bool failed_ = false;
  std::vector<Row> rows_;
  std::vector<double> bandwidth_;  // every pass, GB/s
  double bw_best_ = 0;             // bytes/s: the best pass before loading, the rooflines' denominator
  std::string bandwidth_note_;
  std::unique_ptr<loom::LlamaModel> model_;
  std::string load_note_;
  // LoRA op results (seconds per call) and decode/prefill results by case, for the targets.
  double lora_b1_ = 0, lora_bmax_ = 0;
  struct DecodeResult {
    int batch;
    Adapters adapters;
    bool mix;
    Timing t;
    double roofline;
  };
  std::vector<DecodeResult> decode_;
  Timing prefill_long_;
  double prefill_long_flops_ = 0;
};

bool Bench::measure_bandwidth(const char* when) {
  std::vector<double> gbps;
  std::string error;
  if (cuda_) {
#ifdef LOOM_WITH_CUDA
    if (!cuda_read_bandwidth(s_.bandwidth_bytes, 40, &gbps, &error)) gbps.clear();
#endif
  } else {
    gbps = loom::measure_read_bandwidth(s_.bandwidth_bytes, opt_.threads, 5);
    if (gbps.empty()) error = "cannot allocate the probe's buffer";
  }
  if (gbps.empty()) {
    progress(std::string("read bandwidth (") + when + "): " + error);
    return false;
  }
  const double best = *std::max_element(gbps.begin(), gbps.end());
  progress(std::string("read bandwidth (") + when + "): best " + fmt("%.1f", best) + " GB/s, median " +
           fmt("%.1f", median_of(gbps)) + " over " + std::to_string(gbps.size()) + " passes of " +
           fmt_bytes(double(s_.bandwidth_bytes)));
  bandwidth_.insert(bandwidth_.end(), gbps.begin(), gbps.end());
  bandwidth_note_ += std::string(bandwidth_note_.empty() ? "" : ", ") + when + " " + fmt("%.0f", best);
  if (std::string(when) == "before") bw_best_ = best * 1e9;
  return true;
}

// Device::lora_apply on one module (K = N = lora_hidden, rank R, bf16 A and Bt), one token per
// segment: batch 1, and the largest decode batch with a distinct adapter per row. Each
// repetition issues lora_calls calls back to back between two synchronizes.
void Bench::lora_op() {
  const int64_t K = s_.lora_hidden, N = s_.lora_hidden, R = s_.rank;
  const int bmax = s_.batches.back(), pool = s_.lora_pool;
  const int64_t per = R * (K + N);  // elements of one adapter: A [R, K] then Bt [R, N]
  loom::DeviceBuffer<uint16_t> adapters;
  loom::DeviceBuffer<float> x, y, tmp;
  Status st = adapters.allocate(dev_, int64_t(pool) * per, "LoRA op adapters");
  if (st.ok()) st = x.allocate(dev_, bmax * K, "LoRA op x");
  if (st.ok()) st = y.allocate(dev_, bmax * N, "LoRA op y");
  if (st.ok()) st = tmp.allocate(dev_, bmax * R, "LoRA op scratch");
  if (!st.ok()) return failed_row("lora op", st.message);
  {
    const std::vector<uint16_t> a = random_bf16(size_t(pool * per), std::sqrt(3.0f / float(K)), opt_.seed + 11);
    const std::vector<uint16_t> xb = random_bf16(size_t(bmax * K), 1.0f, opt_.seed + 12);
    std::vector<float> xs(xb.size());
    for (size_t i = 0; i < xs.size(); i++) xs[i] = loom::bf16_to_f32(xb[i]);
    dev_->upload(adapters.data(), a.data(), adapters.bytes());
    dev_->upload(x.data(), xs.data(), x.bytes());
    y.zero();
    st = dev_->synchronize();
  }
  if (!st.ok()) return failed_row("lora op", st.message);
  const loom::LoraOutput out{y.data(), N, N};
  for (const int batch : {1, bmax}) {
    for (const bool cold : {true, false}) {
      // The calls' segments, built before timing: call c uses adapters (c*batch + j) % pool
      // (cold: a full cycle reads the whole pool) or adapters 0..batch-1 every time (hot).
      const int cycle = cold ? std::max(1, pool / batch) : 1;
      std::vector<std::vector<loom::LoraSegment>> shrink(static_cast<size_t>(cycle)), expand(static_cast<size_t>(cycle));
      for (int c = 0; c < cycle; c++)
        for (int j = 0; j < batch; j++) {
          const uint16_t* a = adapters.data() + int64_t((c * batch + j) % pool) * per;
          shrink[size_t(c)].push_back({j, 1, a, DType::BF16, int32_t(R), 0, 2.0f});
          expand[size_t(c)].push_back({j, 1, a + R * K, DType::BF16, int32_t(R), 0, 2.0f});
        }
      const std::vector<int> module(size_t(batch), 0);
      int call = 0;
      auto calls = [&]() {
        for (int i = 0; i < s_.lora_calls; i++, call++) {
          const size_t c = size_t(call % cycle);
          dev_->lora_apply(x.data(), K, K, shrink[c].data(), expand[c].data(), module.data(), batch, &out, tmp.data(), R);
        }
        return dev_->synchronize();
      };
      const std::string figure = "lora op B=" + std::to_string(batch) + (batch > 1 ? " distinct" : "") +
                                 (cold ? "" : " (L2-hot)");
      Timing t = time_runs(calls, 1, 7, 5.0, budget_);
      if (!t.error.empty()) return failed_row(figure, t.error);
      const double per_call = t.median / s_.lora_calls;
      const double bytes = double(batch) * per * 2 + double(batch) * (K + 2 * N) * 4;  // adapters, x, y read+write
      progress(figure + ": " + fmt_time(per_call) + " per call (median of " + std::to_string(t.n) + " x " +
               std::to_string(s_.lora_calls) + " calls)");
      Row r{figure, fmt_time(per_call), fmt_rate(bytes / per_call), fmt_bytes(bytes) + " → " + fmt_rate(bytes / per_call),
            "-", "-", std::to_string(t.n) + "x" + std::to_string(s_.lora_calls), "-"};
      if (bw_best_ > 0) {
        r.roofline = fmt_time(bytes / bw_best_);
        r.share = fmt("%.0f%%", 100 * bytes / bw_best_ / per_call);
      }
      if (cold) {
        (batch == 1 ? lora_b1_ : lora_bmax_) = per_call;
        const double limit = batch == 1 ? 40e-6 : 120e-6;
        if (s_.issue_shape && (batch == 1 || batch == 64))
          r.target = "≤ " + fmt("%.0f", limit * 1e6) + " µs " + verdict(per_call <= limit);
      }
      add(r);
    }
  }
}

// Device::matmul alone on the two largest projection shapes of the model (gate/up: N = I, K = H;
// down: N = H, K = I; bf16, each larger than L2, so every call streams its weights from HBM) at
// batch 1 and 8 (the GEMV) and the largest decode batch (the tensor-core GEMM, split K): the
// share of the roofline the decode steps' projections can reach, apart from everything else a
// step does. Each repetition issues 20 calls back to back between two synchronizes.
void Bench::matmul_op() {
  const ModelConfig& c = s_.cfg;
  std::vector<int> batches = {1, 8, s_.batches.back()};
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  const int bmax = batches.back(), calls = 20;
  const int64_t H = c.hidden, I = c.intermediate;
  loom::DeviceBuffer<uint16_t> w;
  loom::DeviceBuffer<float> x, y;
  Status st = w.allocate(dev_, H * I, "matmul op weights");
  if (st.ok()) st = x.allocate(dev_, bmax * std::max(H, I), "matmul op x");
  if (st.ok()) st = y.allocate(dev_, bmax * std::max(H, I), "matmul op y");
  if (!st.ok()) return failed_row("matmul op", st.message);
  {
    const std::vector<uint16_t> block = random_bf16(size_t(1) << 22, std::sqrt(3.0f / float(H)), opt_.seed + 21);
    for (int64_t at = 0; at < H * I; at += int64_t(block.size()))
      dev_->upload(w.data() + at, block.data(), std::min<int64_t>(int64_t(block.size()), H * I - at) * 2);
    const std::vector<uint16_t> xb = random_bf16(size_t(bmax * std::max(H, I)), 1.0f, opt_.seed + 22);
    std::vector<float> xs(xb.size());
    for (size_t i = 0; i < xs.size(); i++) xs[i] = loom::bf16_to_f32(xb[i]);
    dev_->upload(x.data(), xs.data(), x.bytes());
    st = dev_->synchronize();
  }
  if (!st.ok()) return failed_row("matmul op", st.message);
  struct Case {
    const char* name;
    int64_t N, K;
  };
  for (const Case& k : {Case{"gate/up", I, H}, Case{"down", H, I}}) {
    for (const int batch : batches) {
      const loom::MatmulJob job{{w.data(), DType::BF16, k.N, k.K}, nullptr, y.data(), k.N};
      auto run = [&]() {
        for (int i = 0; i < calls; i++) dev_->matmul(x.data(), batch, k.K, &job, 1, false);
        return dev_->synchronize();
      };
      const std::string figure = std::string("matmul op ") + k.name + " " + std::to_string(k.N) + "x" +
                                 std::to_string(k.K) + " B=" + std::to_string(batch);
      Timing t = time_runs(run, 1, 7, 3.0, budget_);
      if (!t.error.empty()) return failed_row(figure, t.error);
      const double per_call = t.median / calls;
      const double bytes = double(k.N) * double(k.K) * 2 + double(batch) * double(k.K + k.N) * 4;
      const double flops = 2.0 * double(batch) * double(k.N) * double(k.K);
      progress(figure + ": " + fmt_time(per_call) + " per call, " + fmt("%.1f", flops / per_call / 1e12) + " TFLOP/s");
      Row r{figure, fmt_time(per_call), fmt_rate(bytes / per_call), fmt_bytes(bytes) + " → " + fmt_rate(bytes / per_call),
            "-", "-", std::to_string(t.n) + "x" + std::to_string(calls), "-"};
      if (bw_best_ > 0) {
        r.roofline = fmt_time(bytes / bw_best_);
        r.share = fmt("%.0f%%", 100 * bytes / bw_best_ / per_call);
      }
      add(r);
    }
  }
}

// Writes the weights file, loads it into LlamaModel on the device and fills one adapter slot per
// row of the largest batch.
Status Bench::load_model() {
  const ModelConfig& c = s_.cfg;
  const int bmax = s_.batches.back(), bs = 16;
  const int decode_blocks = (s_.context + 1 + bs - 1) / bs;
  const int prefill_blocks = std::max((s_.prefill_long + bs - 1) / bs, s_.prefill_rows * ((s_.prefill_short + bs - 1) / bs));
  const std::vector<TensorSpec> specs = tensor_specs(c);
  int64_t file_bytes = 0;
  for (const TensorSpec& t : specs) {
    int64_t n = 2;
    for (int64_t d : t.shape) n *= d;
    file_bytes += n;
  }
  const std::string dir = weights_dir(opt_.dir, file_bytes);
  if (dir.empty()) return Status::Error("native_error", "cannot create a folder for the weights");
  const std::string file = dir + "/model.safetensors";
  auto t0 = Clock::now();
  // 64 MB of projection values, U(-a, a) with a = sqrt(1.5 / H) (about 0.02 at H = 4096, outputs of
  // variance ~0.5 for a normed input); the LM head's a = sqrt(48 / H) gives logits of std ~4.
  const size_t block_n = size_t(std::min<int64_t>(int64_t(32) << 20, file_bytes / 2));
  const std::vector<uint16_t> block = random_bf16(block_n, std::sqrt(1.5f / float(c.hidden)), opt_.seed);
  const std::vector<uint16_t> head = random_bf16(block_n, std::sqrt(48.0f / float(c.hidden)), opt_.seed + 1);
  std::vector<loom::TensorDesc> table;
  Status st = write_weights(file, specs, block, head, &table);
  const double write_s = seconds_since(t0);
  if (st.ok()) progress("wrote " + fmt_bytes(double(file_bytes)) + " of bf16 weights to " + file + " in " + fmt("%.1f", write_s) + " s");

  loom::RuntimeOptions ro;
  ro.threads = opt_.threads;
  ro.kv_block_size = bs;
  ro.kv_blocks = std::max(bmax * decode_blocks, prefill_blocks);
  ro.max_batch_tokens = std::max({s_.prefill_long, s_.prefill_rows * s_.prefill_short, bmax});
  ro.adapter_slots = bmax;
  ro.max_lora_rank = s_.rank;
  model_ = std::make_unique<loom::LlamaModel>(&timed_, c, ro);
  t0 = Clock::now();
  if (st.ok()) st = model_->load({file}, table);
  const double load_s = seconds_since(t0);
  unlink(file.c_str());  // mapped: the data stays until the model goes
  rmdir(dir.c_str());
  if (!st.ok()) return st;
  progress("loaded the model in " + fmt("%.1f", load_s) + " s (" + std::to_string(ro.kv_blocks) + " KV blocks of " +
           std::to_string(bs) + ", max_batch_tokens " + std::to_string(ro.max_batch_tokens) + ")");

  // One adapter's host values (A [R, in], B [out, R] per module, shared by every layer and slot:
  // the values do not change the work), loaded into bmax slots.
  const int64_t H = c.hidden, I = c.intermediate, QD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim;
  const int64_t in_f[loom::kNumLoraModules] = {H, H, H, QD, H, H, I};
  const int64_t out_f[loom::kNumLoraModules] = {QD, KD, KD, H, I, I, H};
  std::vector<std::vector<float>> a(loom::kNumLoraModules), b(loom::kNumLoraModules);
  Rng rng{opt_.seed + 5};
  for (int m = 0; m < loom::kNumLoraModules; m++) {
    a[size_t(m)].resize(size_t(s_.rank * in_f[m]));
    b[size_t(m)].resize(size_t(out_f[m] * s_.rank));
    for (float& v : a[size_t(m)]) v = rng.uniform(std::sqrt(3.0f / float(in_f[m])));
    for (float& v : b[size_t(m)]) v = rng.uniform(0.05f);
  }
  std::vector<loom::LoraModuleInput> modules;
  for (int64_t l = 0; l < c.layers; l++)
    for (int m = 0; m < loom::kNumLoraModules; m++)
      modules.push_back({int32_t(l), m, s_.rank, 2.0f, a[size_t(m)].data(), b[size_t(m)].data()});
  t0 = Clock::now();
  for (int slot = 0; slot < bmax && st.ok(); slot++) st = model_->load_lora(slot, modules);
  if (!st.ok()) return st;
  const double adapter_bytes = double(adapter_elements(c, s_.rank)) * loom::dtype_size(model_->dtype());
  progress("loaded " + std::to_string(bmax) + " adapters of " + fmt_bytes(adapter_bytes) + " (rank " +
           std::to_string(s_.rank) + ", 7 modules, " + std::to_string(c.layers) + " layers) in " +
           fmt("%.1f", seconds_since(t0)) + " s");
  load_note_ = "weights " + fmt_bytes(double(file_bytes)) + ": written " + fmt("%.1f", write_s) + " s, loaded " +
               fmt("%.1f", load_s) + " s; " + std::to_string(bmax) + " adapters in " + fmt("%.1f", seconds_since(t0)) + " s";
  return Status::Ok();
}

void Bench::decode() {
  const int bs = 16, blocks_per_row = (s_.context + 1 + bs - 1) / bs;
  const int weight_size = loom::dtype_size(model_->dtype()), kv_size = loom::dtype_size(dev_->kv_dtype());
  struct Variant {
    Adapters adapters;
    bool mix;
  };
  const Variant variants[] = {{Adapters::kBase, false}, {Adapters::kBase, true}, {Adapters::kOne, true}, {Adapters::kDistinct, true}};
  for (const int batch : s_.batches) {
    for (const Variant& v : variants) {
      const std::string figure = decode_figure(batch, v.adapters, v.mix);
      StepData d;
      build_step(s_, batch, 1, s_.context, blocks_per_row, v.adapters, v.mix, opt_.seed + uint64_t(batch), &d);
      Timing t = time_decode(&d);
      const int distinct = v.adapters == Adapters::kBase ? 0 : v.adapters == Adapters::kOne ? 1 : batch;
      const DecodeBytes bytes = decode_bytes(s_, batch, distinct, weight_size, kv_size);
      const double roofline = bw_best_ > 0 ? bytes.total() / bw_best_ : 0;
      decode_.push_back({batch, v.adapters, v.mix, t, roofline});
      if (!t.error.empty()) {
        failed_row(figure, t.error);
        continue;
      }
      progress(figure + ": " + fmt_time(t.median) + " median of " + std::to_string(t.n) + " (best " + fmt_time(t.best) + ")");
      std::string work = fmt_bytes(bytes.total()) + " → " + fmt_rate(bytes.total() / t.median);
      if (bytes.adapters > 0) work += " (adapters " + fmt_bytes(bytes.adapters) + ")";
      Row r{figure, fmt_time(t.median), fmt("%.1f tok/s", batch / t.median), work, "-", "-", std::to_string(t.n), "-"};
      if (roofline > 0) r.roofline = fmt_time(roofline), r.share = fmt("%.0f%%", 100 * roofline / t.median);
      if (batch == 1 && v.adapters == Adapters::kBase && !v.mix && roofline > 0)
        r.target = "≥ 75% " + verdict(roofline / t.median >= 0.75);
      add(r);
    }
  }
}

void Bench::prefill() {
  const int bs = 16;
  struct Case {
    int rows, n;
  };
  for (const Case c : {Case{1, s_.prefill_long}, Case{s_.prefill_rows, s_.prefill_short}}) {
    const std::string figure = prefill_figure(c.rows, c.n);
    StepData d;
    build_step(s_, c.rows, c.n, 0, (c.n + bs - 1) / bs, Adapters::kBase, false, opt_.seed + 77, &d);
    Timing t = time_prefill(&d);
    if (c.rows == 1) prefill_long_ = t;
    if (!t.error.empty()) {
      failed_row(figure, t.error);
      continue;
    }
    const double flops = prefill_flops(s_.cfg, c.rows, c.n);
    if (c.rows == 1) prefill_long_flops_ = flops;
    progress(figure + ": " + fmt_time(t.median) + " median of " + std::to_string(t.n) + ", " +
             fmt_flops(flops / t.median) + "/s");
    Row r{figure, fmt_time(t.median), fmt("%.0f tok/s", double(c.rows) * c.n / t.median),
          fmt_flops(flops) + " → " + fmt_flops(flops / t.median) + "/s", "-", "-",
          std::to_string(t.n), "-"};
    if (cuda_) {
      const double roofline = flops / (peak_.tflops * 1e12);
      r.roofline = fmt_time(roofline);
      r.share = fmt("%.0f%%", 100 * roofline / t.median);
      if (c.rows == 1 && s_.issue_shape) r.target = "≥ 50% of peak " + verdict(roofline / t.median >= 0.5);
    }
    add(r);
  }
}

// Each optional kernel path of the cuda device (cuda/kernel-paths.h) against its fallback, in this
// process on the loaded model: the rows it serves re-timed with that path alone off, each beside
// the time with every path on (the rows above), as the ratio off / on (above 1: the path pays).
// Nothing on other devices, and nothing where the cuda code is not compiled in.
void Bench::kernel_paths() {
#ifdef LOOM_WITH_CUDA
  CudaKernelPaths all;
  if (!cuda_ || !cuda_kernel_paths(dev_, &all)) return;
  struct Case {
    const char* path;
    bool CudaKernelPaths::*flag;
    int batch;  // 0: the long prefill
    Adapters adapters;
    bool mix;
  };
  const int bmax = s_.batches.back();
  const Case cases[] = {
      {"tc-attention", &CudaKernelPaths::tc_attention, 0, Adapters::kBase, false},
      {"tc-attention", &CudaKernelPaths::tc_attention, 1, Adapters::kBase, false},
      {"tc-attention", &CudaKernelPaths::tc_attention, bmax, Adapters::kBase, false},
      {"skinny-gemm", &CudaKernelPaths::skinny_gemm, 8, Adapters::kBase, false},
      {"skinny-gemm", &CudaKernelPaths::skinny_gemm, 32, Adapters::kBase, false},
      {"tc-gemm", &CudaKernelPaths::tc_gemm, bmax, Adapters::kBase, false},
      {"skinny-gemm", &CudaKernelPaths::skinny_gemm, 32, Adapters::kDistinct, true},
      {"pdl", &CudaKernelPaths::pdl, 1, Adapters::kBase, false},
      {"pdl", &CudaKernelPaths::pdl, bmax, Adapters::kBase, false},
      {"fused-norm", &CudaKernelPaths::fused_norm, 1, Adapters::kBase, false},
      {"fused-norm", &CudaKernelPaths::fused_norm, 0, Adapters::kBase, false},
      {"wgmma", &CudaKernelPaths::wgmma, 0, Adapters::kBase, false},
      {"tma", &CudaKernelPaths::tma, 0, Adapters::kBase, false},
  };
  const int bs = 16, blocks_per_row = (s_.context + 1 + bs - 1) / bs;
  for (const Case& c : cases) {
    if (!(all.*c.flag)) continue;  // already off for the whole run (LOOM_CUDA_DISABLE)
    const Timing* on = c.batch == 0 ? &prefill_long_ : nullptr;
    for (const DecodeResult& d : decode_)
      if (d.batch == c.batch && d.adapters == c.adapters && d.mix == c.mix) on = &d.t;
    if (on == nullptr || !on->error.empty() || on->median <= 0) continue;
    const std::string figure = (c.batch == 0 ? prefill_figure(1, s_.prefill_long)
                                             : decode_figure(c.batch, c.adapters, c.mix)) +
                               " [" + c.path + " off]";
    StepData d;
    if (c.batch == 0)
      build_step(s_, 1, s_.prefill_long, 0, (s_.prefill_long + bs - 1) / bs, Adapters::kBase, false, opt_.seed + 77, &d);
    else
      build_step(s_, c.batch, 1, s_.context, blocks_per_row, c.adapters, c.mix, opt_.seed + uint64_t(c.batch), &d);
    CudaKernelPaths off = all;
    off.*c.flag = false;
    cuda_set_kernel_paths(dev_, off);
    const Timing t = c.batch == 0 ? time_prefill(&d) : time_decode(&d);
    cuda_set_kernel_paths(dev_, all);
    if (!t.error.empty()) {
      failed_row(figure, t.error);
      continue;
    }
    const double ratio = t.median / on->median;
    progress(figure + ": " + fmt_time(t.median) + " median of " + std::to_string(t.n) + ", " + fmt("%.2f", ratio) +
             "x the time with it on");
    add({figure, fmt_time(t.median), "-", fmt("%.2f× the time with it on", ratio), "-", "-", std::to_string(t.n), "-"});
  }
#endif
}

// BenchOptions::profile: each row's step once untimed (warm-up, outside the range), then once
// between cudaProfilerStart and cudaProfilerStop; no table.
int Bench::profile_steps() {
  const Status loaded = load_model();
  if (!loaded.ok()) {
    std::printf("model load: %s: %s\nFAILED\n", loaded.code.c_str(), loaded.message.c_str());
    return 1;
  }
  const int bs = 16, blocks_per_row = (s_.context + 1 + bs - 1) / bs, bmax = s_.batches.back();
  struct Case {
    int rows, n;  // n > 1: a prefill of n tokens a row
    Adapters adapters;
    bool mix;
  };
  const Case cases[] = {{1, s_.prefill_long, Adapters::kBase, false}, {1, 1, Adapters::kBase, false},
                        {1, 1, Adapters::kBase, true},          {bmax, 1, Adapters::kBase, false},
                        {bmax, 1, Adapters::kBase, true},       {bmax, 1, Adapters::kDistinct, true}};
  for (const Case& c : cases) {
    const std::string figure =
        c.n > 1 ? prefill_figure(c.rows, c.n) : decode_figure(c.rows, c.adapters, c.mix);
    StepData d;
    if (c.n > 1)
      build_step(s_, c.rows, c.n, 0, (c.n + bs - 1) / bs, c.adapters, c.mix, opt_.seed + 77, &d);
    else
      build_step(s_, c.rows, 1, s_.context, blocks_per_row, c.adapters, c.mix, opt_.seed + uint64_t(c.rows), &d);
    Status st = run_step(model_.get(), &d);  // warm-up, outside the range
#ifdef LOOM_WITH_CUDA
    if (cuda_) cuda_profiler_range(true);
#endif
    if (st.ok()) st = run_step(model_.get(), &d);
#ifdef LOOM_WITH_CUDA
    if (cuda_) cuda_profiler_range(false);
#endif
    if (!st.ok()) {
      std::printf("%s: %s: %s\nFAILED\n", figure.c_str(), st.code.c_str(), st.message.c_str());
      return 1;
    }
    progress(figure + ": one step in the profiler's range");
  }
  std::printf("DONE in %.1f s\n", seconds_since(started_));
  return 0;
}

// Where a step's time goes, by device op (op-timing-device.h), for batch-1 decode, the largest
// batch with distinct adapters in the sampling mix, and the long prefill: totals per step over a
// few steps after a warm-up one. First each op waited for alone; then each op timed in the running
// step with no waits (an op's time runs to the next op's start, its launch gaps included): by
// CUDA events in the stream on the cuda device, by the host's clock on the cpu device, whose ops
// are done when their call returns. Lines for after the table.
void Bench::breakdown() {
  const double overhead = timed_.sync_overhead();
  breakdown_ = breakdown_table("each op waited for alone, so every call also holds one wait's round trip, " +
                                   fmt_time(overhead) + " idle; nothing overlaps",
                               nullptr);
  std::unique_ptr<loom_test::QueueMarks> marks;
  std::string how;
#ifdef LOOM_WITH_CUDA
  if (cuda_) marks = cuda_queue_marks(dev_), how = "CUDA events in the stream before each op and at the step's end";
#endif
  if (std::string(dev_->name()) == "cpu")
    marks = std::make_unique<loom_test::HostClockMarks>(), how = "the host's clock before each op and at the step's end";
  if (marks)
    breakdown_ += "\n" + breakdown_table("in the running step, no waits: " + how +
                                              "; an op's time runs to the next op's start",
                                          marks.get());
}

std::string Bench::breakdown_table(const std::string& how, loom_test::QueueMarks* marks) {
  const int bs = 16, blocks_per_row = (s_.context + 1 + bs - 1) / bs, bmax = s_.batches.back();
  struct Case {
    std::string name;
    int rows, n, cache_len, blocks_per_row, steps;
    Adapters adapters;
    bool mix;
  };
  const Case cases[] = {
      {decode_figure(1, Adapters::kBase, false), 1, 1, s_.context, blocks_per_row, 3, Adapters::kBase, false},
      {decode_figure(bmax, Adapters::kDistinct, true), bmax, 1, s_.context, blocks_per_row, 3, Adapters::kDistinct, true},
      {prefill_figure(1, s_.prefill_long), 1, s_.prefill_long, 0, (s_.prefill_long + bs - 1) / bs, 1,
       Adapters::kBase, false},
  };
  const char* tag = marks ? "in-stream breakdown " : "breakdown ";
  std::string out = "where a step's time goes, by device op (" + how + "):\n";
  out += "| step | op | calls per step | time per step | share of the ops' sum |\n|---|---|---:|---:|---:|\n";
  for (const Case& c : cases) {
    if (budget_.over()) {
      out += "| " + c.name + " | skipped: past the --bench-seconds budget | | | |\n";
      continue;
    }
    StepData d;
    build_step(s_, c.rows, c.n, c.cache_len, c.blocks_per_row, c.adapters, c.mix, opt_.seed + 99, &d);
    Status st = run_step(model_.get(), &d);  // warm-up, untimed
    timed_.start(marks);
    std::string error;
    for (int i = 0; i < c.steps && st.ok() && error.empty(); i++) {
      st = run_step(model_.get(), &d);
      if (st.ok()) timed_.end_step(&error);
    }
    timed_.stop();
    if (!st.ok() || !error.empty()) {
      failed_row(tag + c.name, st.ok() ? error : st.code + ": " + st.message);
      continue;
    }
    std::vector<std::pair<std::string, OpTimingDevice::OpTotal>> ops(timed_.totals().begin(), timed_.totals().end());
    std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double sum = 0;
    for (const auto& op : ops) sum += op.second.seconds;
    progress(tag + c.name + ": " + fmt_time(sum / c.steps) + " of ops per step, " +
             (ops.empty() ? std::string("none") : ops[0].first + " the largest"));
    for (const auto& op : ops)
      out += "| " + c.name + " | " + op.first + " | " + fmt("%.1f", double(op.second.calls) / c.steps) + " | " +
             fmt_time(op.second.seconds / c.steps) + " | " + fmt("%.1f%%", 100 * op.second.seconds / sum) + " |\n";
  }
  return out;
}

// The issue's ratio targets, from the rows above (batch 32 and 64 stand for the middle and largest
// batch of another shape).
void Bench::targets() {
  auto find = [&](int batch, Adapters a, bool mix) -> const DecodeResult* {
    for (const DecodeResult& r : decode_)
      if (r.batch == batch && r.adapters == a && r.mix == mix && r.t.error.empty()) return &r;
    return nullptr;
  };
  const int bmax = s_.batches.back();
  int bmid = s_.batches.front();
  for (int b : s_.batches)
    if (b <= 32) bmid = b;
  const std::string mid = std::to_string(bmid), big = std::to_string(bmax);
  const DecodeResult* base = find(bmid, Adapters::kBase, true);
  const DecodeResult* dist = find(bmid, Adapters::kDistinct, true);
  if (base && dist && dist->roofline > 0) {
    const double over = dist->t.median / dist->roofline, ratio = base->t.median / dist->t.median;
    add({"target: B=" + mid + " distinct step ≤ 1.15× its roofline (base + adapter bytes)", fmt("%.2f×", over), "-", "-",
         fmt_time(dist->roofline), "-", "-", verdict(over <= 1.15)});
    add({"target: B=" + mid + " distinct ≥ 0.8× base tok/s (both sampled mix)", fmt("%.2f×", ratio), "-", "-", "-", "-",
         "-", verdict(ratio >= 0.8)});
  }
  const DecodeResult* b1 = find(1, Adapters::kBase, false);
  const DecodeResult* bb = find(bmax, Adapters::kBase, false);
  if (b1 && bb) {
    const double ratio = bb->t.median / b1->t.median;
    add({"target: B=" + big + " step ≤ 2× B=1 step (base, greedy)", fmt("%.2f×", ratio), "-", "-", "-", "-", "-",
         verdict(ratio <= 2.0)});
  }
}

void Bench::print_table() {
  std::printf("\n");
  std::printf("| figure | time | rate | work → achieved | roofline | share | n | target |\n");
  std::printf("|---|---:|---:|---|---:|---:|---:|---|\n");
  for (const Row& r : rows_)
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.figure.c_str(), r.time.c_str(), r.rate.c_str(),
                r.work.c_str(), r.roofline.c_str(), r.share.c_str(), r.n.c_str(), r.target.c_str());
}

int Bench::run() {
  cuda_ = std::string(dev_->name()) == "cuda";
  const ModelConfig& c = s_.cfg;
  std::string device_text = dev_->name();
  if (cuda_) {
#ifdef LOOM_WITH_CUDA
    std::string error;
    if (!cuda_gpu_info(&gpu_, &error)) {
      std::printf("cannot read the GPU's properties: %s\nFAILED\n", error.c_str());
      return 1;
    }
    device_text = gpu_.name + " (sm_" + std::to_string(gpu_.cc_major) + std::to_string(gpu_.cc_minor) + ", " +
                  std::to_string(gpu_.sms) + " SMs, " + fmt("%.1f", gpu_.memory_gib) + " GiB)";
#endif
    peak_ = peak_for(gpu_.name, opt_.peak_tflops);
  } else {
    device_text += " (" + std::to_string(opt_.threads) + " threads)";
  }
  std::printf("loom GPU benchmark (issue 15): shape %s (hidden %lld, %lld layers, %lld/%lld heads, head dim %lld, "
              "intermediate %lld, vocab %lld, bf16), device %s\n",
              s_.name.c_str(), (long long)c.hidden, (long long)c.layers, (long long)c.heads, (long long)c.kv_heads,
              (long long)c.head_dim, (long long)c.intermediate, (long long)c.vocab, device_text.c_str());
  std::printf("decode rows: %d cached tokens each; LoRA rank %d on all 7 modules; prefill 1x%d and %dx%d%s\n",
              s_.context, s_.rank, s_.prefill_long, s_.prefill_rows, s_.prefill_short,
              cuda_ ? (", prefill peak " + fmt("%.0f", peak_.tflops) + " TFLOP/s dense bf16 (" + peak_.source + ")").c_str() : "");
  std::fflush(stdout);

  if (opt_.profile) return profile_steps();
  measure_bandwidth("before");
  budget_.limited = opt_.seconds > 0;
  budget_.deadline = Clock::now() + std::chrono::milliseconds(int64_t(opt_.seconds * 1000));
  lora_op();
  matmul_op();
  const Status loaded = load_model();
  if (!loaded.ok()) {
    failed_row("model load", loaded.code + ": " + loaded.message);
  } else {
    // Prefill first: two seconds, and the only row behind the % of peak target, so a budget that
    // runs out takes decode rows (several per target) rather than it.
    prefill();
    decode();
    breakdown();
    kernel_paths();
  }
  model_.reset();  // returns its memory to the pool (kept reserved there): the probe still fits beside it
  measure_bandwidth("after");
  // The bandwidth row first: the rooflines divide by its best pass before loading; the probe after
  // the model rows shows whether the GPU's memory clock drifted meanwhile.
  if (bw_best_ > 0) {
    rows_.insert(rows_.begin(), Row{std::string(cuda_ ? "HBM" : "DRAM") + " read bandwidth (best pass)",
                                    fmt_time(double(s_.bandwidth_bytes) / bw_best_), fmt_rate(bw_best_),
                                    fmt_bytes(double(s_.bandwidth_bytes)) + " per pass; best before/after: " + bandwidth_note_ + " GB/s",
                                    "-", "-", std::to_string(bandwidth_.size()), "-"});
  } else {
    failed_ = true;
  }
  targets();
  print_table();
  if (!breakdown_.empty()) std::printf("\n%s", breakdown_.c_str());
  if (!load_note_.empty()) std::printf("\nload: %s\n", load_note_.c_str());
  if (!s_.issue_shape) std::printf("(shape %s: the µs and %% of peak targets are for llama3-8b only)\n", s_.name.c_str());
  std::printf("%s in %.1f s\n", failed_ ? "FAILED (a row could not be measured)" : "DONE", seconds_since(started_));
  return failed_ ? 1 : 0;
}

}  // namespace

int run_gpu_bench(const BenchOptions& opt, Device* dev) {
  Shape shape;
  if (!make_shape(opt.shape, &shape)) {
    std::printf("unknown --bench-shape %s (llama3-8b | smollm2-135m | tiny)\n", opt.shape.c_str());
    return 2;
  }
  if (opt.steps > 0) shape.steps = opt.steps;
  if (opt.layers > 0) {
    shape.cfg.layers = opt.layers;
    shape.issue_shape = false;  // fewer layers: not the shape the µs and % of peak targets are for
  }
  Bench bench(opt, shape, dev);
  return bench.run();
}

}  // namespace loom_bench
