// Part b of the check: random Llama, Mistral and Qwen2 models run through LlamaModel on two devices
// side by side. Per model and weight dtype (f32, bf16):
//   1. weights are generated from the seed and written as a real safetensors file in a temp folder,
//      which both devices load (LlamaModel::load reads it through runtime/weights);
//   2. both models get the same adapters: LoRA ranks 8 (every module) and 16 (q, v, o only) and
//      three Medusa heads (one block, the base lm_head);
//   3. one batch of five rows -- base, LoRA r8, LoRA r16, a Medusa tree row and a LoRA r8 + Medusa
//      tree row (each sampled greedily at every node, walked on the device, heads at the walk's
//      end) -- is prefilled and
//      decoded for N steps. The baseline's greedy choices drive every row (so both devices see the
//      same tokens); tree rows accept a greedy path, compact their KV with kv copies and draft the
//      next tree from the heads and from an oracle (the row's plain greedy continuation, computed
//      first on the baseline) so paths of every length get accepted, and a tree row's output must
//      equal that continuation (Medusa greedy is plain greedy);
//   4. every row is also run alone on the device under test, on its own KV blocks.
// Compared (logits through StepInput's inspection copies): logits and Medusa logits, device vs
// baseline (worst |x-ref|/(atol+rtol|ref|), bound per dtype and pair); greedy tokens and the
// devices' walk ends (a mismatch passes only as a
// near-tie: both tokens' baseline logits within the bound); each row alone vs in the batch (same
// bound, same greedy tokens); Device::sample on both devices: on the same (baseline) logits the
// tokens must be identical, on each device's own logits the matches are reported.
#include "model-check.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/llama-model.h"
#include "runtime/device-buffer.h"

namespace loom_check {
namespace {

using loom::Device;
using loom::DType;
using loom::ModelConfig;
using loom::Status;

// The standard's 64-bit Mersenne Twister: its output is fixed by the standard, so the same seed
// gives the same models on every platform (the distributions of <random> are not, hence uniform).
struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  uint64_t next() { return gen(); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) / float(1ull << 24); }
  std::vector<float> vec(size_t n, float scale) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(-scale, scale);
    return v;
  }
};

// FNV-1a of a tensor name: each tensor's values depend on the seed and its name only.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct ModelSpec {
  const char* name;
  ModelConfig cfg;
};

ModelConfig config(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads,
                   int64_t head_dim) {
  ModelConfig c;
  c.vocab = vocab, c.hidden = hidden, c.intermediate = inter, c.layers = layers;
  c.heads = heads, c.kv_heads = kv_heads, c.head_dim = head_dim, c.max_positions = 4096;
  return c;
}

// Each architecture with its own config traits: Llama 3 (llama3 RoPE scaling, theta 500000, tied
// embeddings as Llama 3.2), Mistral (theta 1e6, eps 1e-5, own lm_head, GQA 8), Qwen2 (q/k/v
// biases, theta 1e6, tied, no GQA). Small shapes keep the scalar reference fast.
std::vector<ModelSpec> model_specs(bool small) {
  ModelSpec llama{"llama", small ? config(2048, 256, 512, 2, 4, 1, 64) : config(8192, 512, 1536, 4, 8, 2, 64)};
  llama.cfg.rope_theta = 500000.0;
  llama.cfg.rope_scaling = loom::RopeScaling::Llama3;
  llama.cfg.rope_factor = 8.0, llama.cfg.rope_low_freq = 1.0, llama.cfg.rope_high_freq = 4.0;
  llama.cfg.rope_original_max = 8192.0;
  llama.cfg.rms_eps = 1e-5f;
  llama.cfg.tie_embeddings = true;
  ModelSpec mistral{"mistral", small ? config(2000, 256, 768, 2, 8, 1, 32) : config(6000, 512, 1792, 4, 8, 1, 64)};
  mistral.cfg.rope_theta = 1e6;
  mistral.cfg.rms_eps = 1e-5f;
  ModelSpec qwen2{"qwen2", small ? config(3000, 256, 704, 2, 4, 4, 64) : config(5000, 384, 1024, 3, 6, 6, 64)};
  qwen2.cfg.rope_theta = 1e6;
  qwen2.cfg.rms_eps = 1e-6f;
  qwen2.cfg.attention_bias = true;
  qwen2.cfg.tie_embeddings = true;
  return {llama, mistral, qwen2};
}

// ---- Weights: a safetensors file ----

struct HostTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<HostTensor> make_weights(const ModelConfig& c, uint64_t seed) {
  const int64_t H = c.hidden, I = c.intermediate, QD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim;
  std::vector<HostTensor> ts;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Rng rng(seed ^ name_hash(name));
    HostTensor t{name, std::move(shape), rng.vec(size_t(n), scale)};
    for (auto& v : t.values) v += offset;
    ts.push_back(std::move(t));
  };
  // Uniform(-s, s) with s = sqrt(3 / fan_in) keeps unit variance through a projection; the
  // embedding's scale makes the (tied) logits spread over a few units, so greedy choices are
  // rarely near-ties.
  const float emb = 4.0f / std::sqrt(float(H));
  add("model.embed_tokens.weight", {c.vocab, H}, emb);
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab, H}, emb);
  add("model.norm.weight", {H}, 0.2f, 1.0f);
  for (int64_t l = 0; l < c.layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const float sh = std::sqrt(3.0f / float(H)), sq = std::sqrt(3.0f / float(QD)), si = std::sqrt(3.0f / float(I));
    add(p + "self_attn.q_proj.weight", {QD, H}, sh);
    add(p + "self_attn.k_proj.weight", {KD, H}, sh);
    add(p + "self_attn.v_proj.weight", {KD, H}, sh);
    add(p + "self_attn.o_proj.weight", {H, QD}, 0.5f * sq);
    add(p + "mlp.gate_proj.weight", {I, H}, sh);
    add(p + "mlp.up_proj.weight", {I, H}, sh);
    add(p + "mlp.down_proj.weight", {H, I}, 0.5f * si);
    add(p + "input_layernorm.weight", {H}, 0.2f, 1.0f);
    add(p + "post_attention_layernorm.weight", {H}, 0.2f, 1.0f);
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {QD}, 0.5f);
      add(p + "self_attn.k_proj.bias", {KD}, 0.5f);
      add(p + "self_attn.v_proj.bias", {KD}, 0.5f);
    }
  }
  return ts;
}

// Writes `ts` in `dt` (f32 or bf16) as a safetensors file (8-byte little-endian header length,
// JSON header, data) and returns the tensor table LlamaModel::load takes. The header is padded
// with spaces so the data starts 64-byte aligned.
Status write_safetensors(const std::string& path, const std::vector<HostTensor>& ts, DType dt,
                         std::vector<loom::TensorDesc>* table) {
  const int64_t es = loom::dtype_size(dt);
  std::string header = "{";
  int64_t off = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    const int64_t bytes = int64_t(ts[i].values.size()) * es;
    header += (i ? "," : "") + std::string("\"") + ts[i].name + "\":{\"dtype\":\"" +
              (dt == DType::F32 ? "F32" : "BF16") + "\",\"shape\":[";
    for (size_t d = 0; d < ts[i].shape.size(); d++) header += (d ? "," : "") + std::to_string(ts[i].shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + bytes) + "]}";
    off += bytes;
  }
  header += "}";
  while ((8 + header.size()) % 64 != 0) header += ' ';
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::Error("native_error", "cannot write " + path);
  uint64_t len = header.size();
  bool ok = std::fwrite(&len, 8, 1, f) == 1 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  int64_t at = 8 + int64_t(header.size());
  for (const HostTensor& t : ts) {
    table->push_back({t.name, 0, at, int64_t(t.values.size()) * es, dt, t.shape});
    if (dt == DType::F32) {
      ok = ok && std::fwrite(t.values.data(), 4, t.values.size(), f) == t.values.size();
    } else {
      std::vector<uint16_t> h(t.values.size());
      for (size_t i = 0; i < h.size(); i++) h[i] = loom::f32_to_bf16(t.values[i]);
      ok = ok && std::fwrite(h.data(), 2, h.size(), f) == h.size();
    }
    at += int64_t(t.values.size()) * es;
  }
  ok = std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::Error("native_error", "short write to " + path);
}

// ---- Adapters ----

struct LoraHost {
  std::vector<std::vector<float>> a, b;  // per module entry
  std::vector<loom::LoraModuleInput> modules;
};

// A random adapter of `rank` on the listed modules of every layer, scale alpha/r = 2.
void make_lora(const ModelConfig& c, int rank, const std::vector<int>& mods, uint64_t seed, LoraHost* out) {
  const int64_t H = c.hidden, I = c.intermediate, QD = c.heads * c.head_dim, KD = c.kv_heads * c.head_dim;
  const int64_t in_f[loom::kNumLoraModules] = {H, H, H, QD, H, H, I};
  const int64_t out_f[loom::kNumLoraModules] = {QD, KD, KD, H, I, I, H};
  Rng rng(seed);
  for (int64_t l = 0; l < c.layers; l++)
    for (int m : mods) {
      out->a.push_back(rng.vec(size_t(rank * in_f[m]), std::sqrt(3.0f / float(in_f[m]))));
      out->b.push_back(rng.vec(size_t(out_f[m] * rank), 0.5f * std::sqrt(3.0f / float(rank))));
    }
  size_t k = 0;
  for (int64_t l = 0; l < c.layers; l++)
    for (int m : mods) {
      out->modules.push_back({int32_t(l), m, rank, 2.0f, out->a[k].data(), out->b[k].data()});
      k++;
    }
}

struct MedusaHost {
  std::vector<std::vector<float>> w, b;
  std::vector<loom::MedusaHeadInput> heads;
};

void make_medusa(const ModelConfig& c, int nheads, uint64_t seed, MedusaHost* out) {
  Rng rng(seed);
  const int64_t H = c.hidden;
  for (int h = 0; h < nheads; h++) {
    out->w.push_back(rng.vec(size_t(H * H), std::sqrt(3.0f / float(H))));
    out->b.push_back(rng.vec(size_t(H), 0.3f));
  }
  for (int h = 0; h < nheads; h++) out->heads.push_back({{out->w[size_t(h)].data()}, {out->b[size_t(h)].data()}, nullptr});
}

// ---- Rows and steps ----

// kSlotMedusaDraft: the same heads over a draft vocabulary (every id but those ≡ 2 mod 3: runs of
// two with gaps), so their LM head is rows copied on the device and their drafts map through it.
constexpr int kSlotLora8 = 0, kSlotLora16 = 1, kSlotMedusa = 2, kSlotMedusaDraft = 3, kHeads = 3;
constexpr int kBlockSize = 16, kBlocksPerSeq = 10;
// The draft tree of a Medusa row: node 0 is the root (the last accepted token), nodes 1 and 2
// its children, 3 and 4 children of 1, 5 a child of 3.
const std::vector<int32_t> kTreeParents = {-1, 0, 0, 1, 1, 3};

enum class Mode { kPlain, kTree };

// One sequence of the batch. The state (tokens fed, committed length, drafts) is shared by every
// place the row runs; only the KV blocks differ (`blocks[lane]`: 0 in the batch, 1 alone).
struct Seq {
  const char* kind;
  int lora = -1, medusa = -1;
  Mode mode = Mode::kPlain;
  std::vector<int32_t> prompt, feed, parents;  // parents: empty for a chain (causal)
  int32_t cache_len = 0;
  std::vector<int32_t> out;       // tokens produced so far (the greedy continuation)
  std::vector<int32_t> copy_from, copy_to;  // KV compaction to apply at the next step
  std::vector<int32_t> oracle;    // the plain greedy continuation of the prompt
  std::vector<int32_t> blocks[2];
  const std::vector<int32_t>* draft_vocab = nullptr;  // its heads' draft vocabulary (null: the whole one)
};

// One row's step inputs and where its outputs land; the storage stays put while the step runs.
struct RowIO {
  std::vector<uint8_t> mask;
  std::vector<int32_t> targets;  // causal rows: score a (dummy) target at every position but the last
  loom::RowSampleDesc sampling;  // greedy
  int64_t logit_row = 0, medusa_row = 0;  // first logits / Medusa logits row of this row (reordered)
  int64_t sampled_row = 0, scored_row = 0;  // where the step put them (see StepInput::debug_logits)
};

struct StepResult {
  std::vector<float> logits, medusa;  // [Σ n, V] every position of every row in batch order; [Σ heads, V]
  std::vector<int32_t> leaves;        // each row's walk end (-1: a causal row)
  std::vector<int32_t> drafts;        // [Σ heads] each head's best id, as the step returned it
  std::vector<RowIO> io;
};

int32_t depth(const std::vector<int32_t>& parents, int i) {
  int d = 0;
  for (int j = i; parents[size_t(j)] >= 0; j = parents[size_t(j)]) d++;
  return d;
}

// The engine's greedy choice: first maximum, NaN never chosen.
int32_t argmax(const float* x, int64_t V) {
  int32_t best = -1;
  float m = -INFINITY;
  for (int64_t i = 0; i < V; i++)
    if (x[i] > m) m = x[i], best = int32_t(i);
  return best;
}

std::vector<int32_t> top2(const float* x, int64_t V) {
  int32_t a = argmax(x, V), b = -1;
  for (int64_t i = 0; i < V; i++)
    if (i != a && (b < 0 || x[i] > x[b])) b = int32_t(i);
  return {a, b};
}

// Run one step of `seqs` (each feeding its `feed` tokens) on `model` in KV lane `lane`. Every row
// samples greedily; a causal row also scores every position but its last, so the step computes
// logits at every token, which come back through StepInput::debug_logits and are reordered here
// to one block per row, positions in order. Heads run where each row's sampling ends.
Status run_step(loom::LlamaModel* model, std::vector<Seq*>& seqs, int lane, StepResult* r) {
  const int64_t V = model->config().vocab;
  loom::StepInput in;
  std::vector<int32_t> tokens, positions;
  r->io.assign(seqs.size(), RowIO{});
  int64_t nlog = 0, nmed = 0, nsampled = 0, nscored = 0;
  for (size_t k = 0; k < seqs.size(); k++) {
    Seq& s = *seqs[k];
    RowIO& io = r->io[k];
    const int n = int(s.feed.size());
    loom::StepRowDesc row{};
    row.tok_start = int32_t(tokens.size());
    row.n = n;
    row.cache_len = s.cache_len;
    row.lora_slot = s.lora;
    row.medusa_slot = s.medusa;
    row.medusa_heads = s.medusa >= 0 ? kHeads : 0;
    row.block_table = s.blocks[lane].data();
    row.num_blocks = int32_t(s.blocks[lane].size());
    for (int i = 0; i < n; i++) {
      tokens.push_back(s.feed[size_t(i)]);
      positions.push_back(s.cache_len + (s.parents.empty() ? i : depth(s.parents, i)));
    }
    io.logit_row = nlog;
    nlog += n;
    io.sampled_row = nsampled;
    io.scored_row = nscored;
    if (!s.parents.empty()) {
      io.mask.assign(size_t(n * n), 0);
      for (int i = 0; i < n; i++)
        for (int j = i; j >= 0; j = s.parents[size_t(j)]) io.mask[size_t(i * n + j)] = 1;
      row.tree_mask = io.mask.data();
      nsampled += n;
    } else {
      io.targets.assign(size_t(n), 0);
      io.targets[size_t(n - 1)] = -1;
      row.score_targets = io.targets.data();
      row.score_count = n;
      nsampled += 1;
      nscored += n - 1;
    }
    row.sampling = &io.sampling;
    io.medusa_row = nmed;
    if (s.medusa >= 0) nmed += kHeads;
    in.rows.push_back(row);
    if (!s.copy_from.empty())
      in.copies.push_back({s.blocks[lane].data(), int32_t(s.blocks[lane].size()), s.copy_from.data(),
                           s.copy_to.data(), int32_t(s.copy_from.size())});
  }
  in.tokens = tokens.data();
  in.positions = positions.data();
  in.num_tokens = int32_t(tokens.size());
  std::vector<int32_t> sampled(static_cast<size_t>(nsampled)), draft_ids(static_cast<size_t>(nmed));
  std::vector<float> logprobs(static_cast<size_t>(nsampled)), scores(static_cast<size_t>(nscored));
  std::vector<float> step_logits(static_cast<size_t>((nsampled + nscored) * V));
  in.tokens_out = sampled.data(), in.tokens_len = nsampled;
  in.logprobs_out = logprobs.data();
  in.scores = scores.data(), in.scores_len = nscored;
  r->leaves.assign(seqs.size(), -2);
  in.walk_ends = r->leaves.data(), in.walk_ends_len = int64_t(seqs.size());
  in.draft_top_k = 1;
  in.draft_ids = draft_ids.data(), in.draft_ids_len = nmed;
  r->medusa.assign(size_t(nmed * V), 0.0f);
  in.debug_logits = step_logits.data();
  in.debug_medusa_logits = r->medusa.data();
  LOOM_RETURN_IF_ERROR(model->step(in));
  r->drafts = draft_ids;
  r->logits.assign(size_t(nlog * V), 0.0f);
  for (size_t k = 0; k < seqs.size(); k++) {
    const RowIO& io = r->io[k];
    const int n = int(seqs[k]->feed.size());
    float* dst = &r->logits[size_t(io.logit_row * V)];
    auto copy_row = [&](int64_t from, int i) {
      std::memcpy(dst + int64_t(i) * V, &step_logits[size_t(from * V)], size_t(V) * 4);
    };
    if (!seqs[k]->parents.empty()) {
      for (int i = 0; i < n; i++) copy_row(io.sampled_row + i, i);
    } else {
      for (int i = 0; i < n - 1; i++) copy_row(nsampled + io.scored_row + i, i);
      copy_row(io.sampled_row, n - 1);
    }
  }
  return Status::Ok();
}

// After a step (decided on the baseline's outputs `r`): commit each row's accepted tokens, queue
// its KV compaction and feed the next step (the bonus token, and a fresh draft tree for tree rows).
// Returns each row's leaf node (0 for chains), which the devices' walks must end at.
std::vector<int32_t> advance(std::vector<Seq*>& seqs, const StepResult& r, int64_t V, int step) {
  std::vector<int32_t> leaves;
  for (size_t k = 0; k < seqs.size(); k++) {
    Seq& s = *seqs[k];
    const RowIO& io = r.io[k];
    const int n = int(s.feed.size());
    auto am = [&](int node) { return argmax(&r.logits[size_t((io.logit_row + node) * V)], V); };
    std::vector<int32_t> path = {0};
    if (s.parents.empty()) {
      path = {n - 1};
    } else {
      for (bool moved = true; moved;) {
        moved = false;
        for (int c = path.back() + 1; c < n; c++)
          if (s.parents[size_t(c)] == path.back() && s.feed[size_t(c)] == am(path.back())) {
            path.push_back(c);
            moved = true;
            break;
          }
      }
    }
    const int leaf = path.back();
    leaves.push_back(leaf);
    s.copy_from.clear();
    s.copy_to.clear();
    if (s.parents.empty()) {
      s.cache_len += n;
    } else {
      for (size_t i = 1; i < path.size(); i++) {
        s.out.push_back(s.feed[size_t(path[i])]);
        if (path[i] != int(i)) s.copy_from.push_back(s.cache_len + path[i]), s.copy_to.push_back(s.cache_len + int(i));
      }
      s.cache_len += int32_t(path.size());
    }
    const int32_t bonus = am(leaf);
    s.out.push_back(bonus);
    s.feed = {bonus};
    if (s.medusa < 0) continue;
    // Draft: the heads' two best at depths 1 and 2, head 2's best at depth 3, where the Medusa
    // logits of the leaf are (one block per head). While the row still follows its oracle, some
    // nodes take the oracle's tokens so accepted paths of length 0..3 all occur.
    const float* heads = &r.medusa[size_t(io.medusa_row * V)];
    const int64_t DV = s.draft_vocab ? int64_t(s.draft_vocab->size()) : V;  // columns of a head's logits
    auto best2 = [&](const float* x) {
      std::vector<int32_t> ids = top2(x, DV);
      if (s.draft_vocab)
        for (int32_t& id : ids) id = (*s.draft_vocab)[size_t(id)];
      return ids;
    };
    std::vector<int32_t> h0 = best2(heads), h1 = best2(heads + V), h2 = best2(heads + 2 * V);
    std::vector<int32_t> draft = {bonus, h0[0], h0[1], h1[0], h1[1], h2[0]};
    const size_t q = s.out.size();  // the oracle's next tokens are oracle[q], oracle[q+1], ...
    const bool on_track = s.oracle.size() >= q + 3 && std::equal(s.out.begin(), s.out.end(), s.oracle.begin());
    if (on_track && step % 5 != 4) {
      const int pattern = step % 4;
      draft[pattern == 2 ? 2 : 1] = s.oracle[q];              // depth 1 (second child on pattern 2)
      if (pattern != 1 && pattern != 2) draft[3] = s.oracle[q + 1];  // depth 2
      if (pattern == 0) draft[5] = s.oracle[q + 2];                   // depth 3
    }
    s.feed = draft;
    s.parents = kTreeParents;
  }
  return leaves;
}

// ---- Comparison ----

struct Tolerance {
  double atol, rtol;
};

// The worst |x - ref| / (atol + rtol |ref|) seen so far (a non-finite x is a failure), and where:
// a failing table row prints it, which says which op family to look at.
struct Worst {
  double ratio = 0;
  std::string where;
};

// Folds n values of `what` (rows of V) at decode step `step` into `w`.
void track_worst(const float* x, const float* ref, size_t n, int64_t V, Tolerance t, const char* what, int step,
                 Worst* w, int64_t row0 = 0) {
  for (size_t i = 0; i < n; i++) {
    const double r = std::isfinite(x[i]) ? std::fabs(double(x[i]) - ref[i]) / (t.atol + t.rtol * std::fabs(double(ref[i])))
                                         : 1e30;
    if (r <= w->ratio) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s, step %d, row %lld, column %lld: %.6g vs %.6g", what, step,
                  static_cast<long long>(row0 + int64_t(i) / V), static_cast<long long>(int64_t(i) % V), double(x[i]),
                  double(ref[i]));
    w->ratio = r, w->where = buf;
  }
}

// Greedy tokens of logits rows: exact matches, and mismatches that are near-ties (the baseline
// scores both tokens within the bound of each other).
struct TokenCount {
  int64_t total = 0, same = 0, ties = 0;
  bool ok() const { return same + ties == total; }
  std::string text() const {
    std::string s = std::to_string(same) + "/" + std::to_string(total);
    if (ties) s += " (" + std::to_string(ties) + " tie" + (ties > 1 ? "s" : "") + ")";
    return s;
  }
};

void count_greedy(const float* x, const float* ref, int64_t rows, int64_t V, Tolerance t, TokenCount* c) {
  for (int64_t r = 0; r < rows; r++) {
    const float* a = x + r * V;
    const float* b = ref + r * V;
    const int32_t ia = argmax(a, V), ib = argmax(b, V);
    c->total++;
    if (ia == ib)
      c->same++;
    else if (ia >= 0 && ib >= 0 && std::fabs(double(b[ib]) - b[ia]) <= 2 * (t.atol + t.rtol * std::fabs(double(b[ib]))))
      c->ties++;
  }
}

// Device::sample on every logits row of `logits` (host [rows, V]) on `dev`: seeded nucleus
// sampling, one stream per row, `draws` already made.
Status sample_rows(Device* dev, const std::vector<float>& logits, int64_t V, uint64_t draws, std::vector<int32_t>* out) {
  const int rows = int(int64_t(logits.size()) / V);
  if (rows == 0) return Status::Ok();
  std::vector<loom::SampleParams> ps(static_cast<size_t>(rows));
  for (int r = 0; r < rows; r++) {
    loom::SampleParams& p = ps[size_t(r)];
    p.row = r;
    p.temperature = r % 3 == 0 ? 0.7 : 1.0;
    p.top_k = r % 2 ? 40 : 0;
    p.top_p = 0.95;
    p.seed = 1000 + uint64_t(r);
    p.draws = draws;
  }
  loom::DeviceBuffer<float> x, lp, tlp;
  loom::DeviceBuffer<int32_t> tok, tid;
  loom::DeviceBuffer<uint8_t> scratch;
  LOOM_RETURN_IF_ERROR(x.allocate(dev, int64_t(logits.size()), "logits"));
  LOOM_RETURN_IF_ERROR(tok.allocate(dev, rows, "tokens"));
  LOOM_RETURN_IF_ERROR(lp.allocate(dev, rows, "logprobs"));
  LOOM_RETURN_IF_ERROR(tid.allocate(dev, rows, "top ids"));
  LOOM_RETURN_IF_ERROR(tlp.allocate(dev, rows, "top logprobs"));
  LOOM_RETURN_IF_ERROR(scratch.allocate(dev, rows * loom::sample_row_scratch_bytes(V), "sampler scratch"));
  dev->upload(x.data(), logits.data(), x.bytes());
  dev->sample(x.data(), V, V, ps.data(), rows, 1, tok.data(), lp.data(), tid.data(), tlp.data(), scratch.data());
  out->assign(size_t(rows), -2);
  dev->download(out->data(), tok.data(), tok.bytes());
  return dev->synchronize();
}

struct RunResult {
  Worst worst, solo_worst;
  TokenCount greedy, solo, sampled_same_logits, sampled_own_logits;
  int64_t tree_steps = 0, tree_accepted = 0;  // tree-row decode steps and draft tokens they accepted
  TokenCount drafts;  // each head's returned id against the first maximum of its logits (both devices)
  bool medusa_plain = true;                   // every tree row's output equals its plain greedy one
  std::string error;
  double seconds = 0;
};

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t && *t ? t : "/tmp") + "/loom-model-check.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  return mkdtemp(buf.data()) ? std::string(buf.data()) : std::string();
}

Tolerance tolerance(Device* dut, Device* base, DType dt) {
  // Both devices with f32 KV (cpu, reference): only the summation order differs.
  if (dut->kv_dtype() == DType::F32 && base->kv_dtype() == DType::F32) return {2e-3, 2e-3};
  // The same 16-bit KV dtype on both (main.cc gives the baseline the cuda device's): the caches
  // round alike, and what differs is the summation order and, for bf16 weights, the cuda prefill
  // GEMM's activations rounded to bf16 once per call (2^-9 relative). The SIMT emulator's worst
  // over the small models (4 steps): 1.5e-3 with f32 weights, 3.8e-3 with bf16.
  if (dut->kv_dtype() == base->kv_dtype()) return dt == DType::F32 ? Tolerance{5e-3, 5e-3} : Tolerance{1e-2, 1e-2};
  // One f16 and one f32 cache: the f16 rounding dominates and grows with the steps (~2e-2, and
  // 3.2e-2 once, on an H100 over 20 steps, for f32 and bf16 weights alike).
  return {4e-2, 4e-2};
}

RunResult run_one(const ModelCheckOptions& opt, const ModelSpec& spec, DType dt, Device* dut, Device* base) {
  RunResult res;
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = spec.cfg;
  const int64_t V = c.vocab;
  const Tolerance tol = tolerance(dut, base, dt);
  const std::string dir = temp_dir();
  if (dir.empty()) return res.error = "cannot create a temp folder", res;
  const std::string file = dir + "/model.safetensors";
  std::vector<loom::TensorDesc> table;
  Status st = write_safetensors(file, make_weights(c, opt.seed * 7919 + name_hash(spec.name)), dt, &table);

  loom::RuntimeOptions ro;
  ro.threads = opt.threads;
  ro.kv_blocks = 12 * kBlocksPerSeq;
  ro.kv_block_size = kBlockSize;
  ro.max_batch_tokens = 96;
  ro.adapter_slots = 4;
  ro.max_lora_rank = 16;
  loom::LlamaModel dmodel(dut, c, ro), bmodel(base, c, ro);
  LoraHost l8, l16;
  MedusaHost med;
  make_lora(c, 8, {loom::kQ, loom::kK, loom::kV, loom::kO, loom::kGate, loom::kUp, loom::kDown}, opt.seed * 31 + 1, &l8);
  make_lora(c, 16, {loom::kQ, loom::kV, loom::kO}, opt.seed * 31 + 2, &l16);
  make_medusa(c, kHeads, opt.seed * 31 + 3, &med);
  std::vector<int32_t> draft_vocab;
  for (int32_t id = 0; id < int32_t(V); id++)
    if (id % 3 != 2) draft_vocab.push_back(id);
  for (loom::LlamaModel* m : {&dmodel, &bmodel}) {
    if (st.ok()) st = m->load({file}, table);
    if (st.ok()) st = m->load_lora(kSlotLora8, l8.modules);
    if (st.ok()) st = m->load_lora(kSlotLora16, l16.modules);
    if (st.ok()) st = m->load_medusa(kSlotMedusa, 1, med.heads, {});
    if (st.ok()) st = m->load_medusa(kSlotMedusaDraft, 1, med.heads, draft_vocab);
  }
  unlink(file.c_str());  // mapped: the data stays until the models go
  rmdir(dir.c_str());
  if (!st.ok()) return res.error = st.code + ": " + st.message, res;

  // The batch: base, LoRA r8, LoRA r16 (prompt across a block boundary), a Medusa tree row
  // walked on the device, and a LoRA r8 Medusa tree row.
  Rng prng(opt.seed * 131 + name_hash(spec.name));
  std::vector<Seq> seqs = {{"base"}, {"lora8"}, {"lora16"}, {"medusa-leaf"}, {"lora8+medusa"}};
  const int prompt_len[] = {13, 9, 21, 7, 10};
  seqs[1].lora = seqs[4].lora = kSlotLora8;
  seqs[2].lora = kSlotLora16;
  seqs[3].medusa = kSlotMedusa;
  seqs[4].medusa = kSlotMedusaDraft;
  seqs[4].draft_vocab = &draft_vocab;
  seqs[3].mode = seqs[4].mode = Mode::kTree;
  int next_block = 0;
  for (size_t k = 0; k < seqs.size(); k++) {
    for (int i = 0; i < prompt_len[k]; i++) seqs[k].prompt.push_back(int32_t(prng.next() % uint64_t(V)));
    for (auto& lane : seqs[k].blocks)
      for (int b = 0; b < kBlocksPerSeq; b++) lane.push_back(next_block++);
    seqs[k].feed = seqs[k].prompt;
  }

  // Oracle: each Medusa row's plain greedy continuation on the baseline, which also drives the
  // batch, so a tree row's output must equal it (Medusa greedy is plain greedy). Lane 1's blocks,
  // before the solo runs use them.
  for (int k : {3, 4}) {
    Seq o = seqs[size_t(k)];
    o.medusa = -1;
    std::vector<Seq*> one = {&o};
    StepResult r;
    const int len = 4 * opt.decode_steps + 8;
    while (st.ok() && int(o.out.size()) < len) {
      st = run_step(&bmodel, one, 1, &r);
      if (st.ok()) advance(one, r, V, 0);
    }
    seqs[size_t(k)].oracle = o.out;
  }
  if (!st.ok()) return res.error = "oracle: " + st.message, res;

  std::vector<Seq*> all;
  for (auto& s : seqs) all.push_back(&s);
  std::vector<int32_t> sampled_d, sampled_b, sampled_db;
  for (int step = 0; step <= opt.decode_steps && st.ok(); step++) {
    StepResult rd, rb;
    st = run_step(&dmodel, all, 0, &rd);
    if (st.ok()) st = run_step(&bmodel, all, 0, &rb);
    if (!st.ok()) break;
    track_worst(rd.logits.data(), rb.logits.data(), rb.logits.size(), V, tol, "logits", step, &res.worst);
    count_greedy(rd.logits.data(), rb.logits.data(), int64_t(rb.logits.size()) / V, V, tol, &res.greedy);
    // A tree row whose walk ended elsewhere on the device ran its heads at another node: its
    // Medusa logits are not comparable. That is allowed only when a near-tie among its nodes'
    // greedy choices explains it (counted with the walk ends below); any other divergence fails
    // there, and every other row's heads are compared.
    std::vector<bool> walk_tie(all.size(), false);
    for (size_t k = 0; k < all.size(); k++) {
      const RowIO& io = rd.io[k];
      if (all[k]->parents.empty() || rd.leaves[k] == rb.leaves[k]) continue;
      TokenCount nodes;
      count_greedy(&rd.logits[size_t(io.logit_row * V)], &rb.logits[size_t(io.logit_row * V)],
                   int64_t(all[k]->feed.size()), V, tol, &nodes);
      walk_tie[k] = nodes.ok() && nodes.ties > 0;
    }
    for (size_t k = 0; k < all.size(); k++) {
      if (all[k]->medusa < 0 || walk_tie[k]) continue;
      const size_t at = size_t(rd.io[k].medusa_row * V), n = size_t(kHeads * V);
      track_worst(rd.medusa.data() + at, rb.medusa.data() + at, n, V, tol, "medusa logits", step, &res.worst,
                  rd.io[k].medusa_row);
    }
    // Each head's returned draft is the first maximum of the logits it computed (over its draft
    // vocabulary, mapped to a token id), on both devices.
    for (const StepResult* r : {&rd, &rb})
      for (size_t k = 0; k < all.size(); k++) {
        const Seq& s = *all[k];
        if (s.medusa < 0) continue;
        const int64_t DV = s.draft_vocab ? int64_t(s.draft_vocab->size()) : V;
        for (int h = 0; h < kHeads; h++) {
          const int64_t row = r->io[k].medusa_row + h;
          const int32_t best = argmax(&r->medusa[size_t(row * V)], DV);
          res.drafts.total++;
          res.drafts.same += r->drafts[size_t(row)] == (s.draft_vocab ? (*s.draft_vocab)[size_t(best)] : best);
        }
      }
    // Each row alone on the device under test (its own blocks), against its batched self.
    for (size_t k = 0; k < all.size() && st.ok(); k++) {
      std::vector<Seq*> one = {all[k]};
      StepResult rs;
      st = run_step(&dmodel, one, 1, &rs);
      if (!st.ok()) break;
      const RowIO& io = rd.io[k];
      const float* bl = &rd.logits[size_t(io.logit_row * V)];
      track_worst(rs.logits.data(), bl, rs.logits.size(), V, tol, "solo logits", step, &res.solo_worst);
      const float* bm = rd.medusa.data() + io.medusa_row * V;
      track_worst(rs.medusa.data(), bm, rs.medusa.size(), V, tol, "solo medusa logits", step, &res.solo_worst);
      count_greedy(rs.logits.data(), bl, int64_t(rs.logits.size()) / V, V, tol, &res.solo);
      if (!all[k]->parents.empty()) {
        res.solo.total++;
        res.solo.same += rs.leaves[0] == rd.leaves[k];
      }
    }
    // Seeded sampling: the same logits give the same tokens on both devices; each device's own
    // logits usually do too (a differing token is a logits difference within the bound).
    if (st.ok()) st = sample_rows(dut, rb.logits, V, uint64_t(step), &sampled_db);
    if (st.ok()) st = sample_rows(base, rb.logits, V, uint64_t(step), &sampled_b);
    if (st.ok()) st = sample_rows(dut, rd.logits, V, uint64_t(step), &sampled_d);
    for (size_t i = 0; i < sampled_b.size() && st.ok(); i++) {
      res.sampled_same_logits.total++, res.sampled_own_logits.total++;
      res.sampled_same_logits.same += sampled_db[i] == sampled_b[i];
      res.sampled_own_logits.same += sampled_d[i] == sampled_b[i];
    }
    if (!st.ok()) break;
    std::vector<bool> tree, walked;  // tree rows; those whose walk end the devices found
    for (const Seq* s : all) {
      tree.push_back(!s->parents.empty());
      walked.push_back(!s->parents.empty());
    }
    const std::vector<int32_t> leaves = advance(all, rb, V, step);
    for (size_t k = 0; k < all.size(); k++)
      if (tree[k]) res.tree_steps++, res.tree_accepted += depth(kTreeParents, leaves[k]);
    // The devices' own tree walks: the leaf the baseline's argmax gives.
    for (size_t k = 0; k < all.size(); k++)
      if (walked[k]) {
        res.greedy.total += 2;
        res.greedy.same += (rb.leaves[k] == leaves[k]) + (rd.leaves[k] == leaves[k]);
        res.greedy.ties += rd.leaves[k] != leaves[k] && walk_tie[k];
      }
  }
  for (const Seq& s : seqs)
    if (s.medusa >= 0)
      res.medusa_plain = res.medusa_plain && s.oracle.size() >= s.out.size() &&
                         std::equal(s.out.begin(), s.out.end(), s.oracle.begin());
  if (!st.ok()) res.error = st.code + ": " + st.message;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace

bool run_model_check(const ModelCheckOptions& opt, Device* dut, Device* base) {
  const std::string pair = std::string(dut->name()) + " vs " + base->name();
  std::printf("b. whole models (%s shapes), prefill + %d decode steps, rows: base, lora r8, lora r16, medusa "
              "tree, lora r8 + medusa tree over a draft vocabulary (sampled at every node, walked on the device); "
              "seed %llu\n",
              opt.small ? "small" : "real", opt.decode_steps, static_cast<unsigned long long>(opt.seed));
  std::printf("%-8s %-5s %-17s %6s %-13s %6s %-13s %-16s %-11s %5s  %s\n", "model", "dtype", "devices", "worst",
              "greedy", "solo", "solo greedy", "sampled same/own", "tree acc/=", "secs", "result");
  bool all_ok = true;
  for (const ModelSpec& spec : model_specs(opt.small)) {
    if (!opt.filter.empty() && std::string(spec.name).find(opt.filter) == std::string::npos) continue;
    for (DType dt : {DType::F32, DType::BF16}) {
      const RunResult r = run_one(opt, spec, dt, dut, base);
      const bool ok = r.error.empty() && r.worst.ratio <= 1.0 && r.solo_worst.ratio <= 1.0 && r.greedy.ok() && r.solo.ok() &&
                      r.sampled_same_logits.same == r.sampled_same_logits.total && r.greedy.total > 0 &&
                      r.medusa_plain && r.drafts.total > 0 && r.drafts.same == r.drafts.total;
      char tree[48];
      std::snprintf(tree, sizeof tree, "%.2f %s", r.tree_steps ? double(r.tree_accepted) / double(r.tree_steps) : 0.0,
                    r.medusa_plain ? "yes" : "NO");
      all_ok = all_ok && ok;
      const std::string sampled = std::to_string(r.sampled_same_logits.same) + "/" +
                                  std::to_string(r.sampled_own_logits.same) + " of " +
                                  std::to_string(r.sampled_same_logits.total);
      std::printf("%-8s %-5s %-17s %6.3f %-13s %6.3f %-13s %-16s %-11s %5.1f  %s%s\n", spec.name,
                  dt == DType::F32 ? "f32" : "bf16", pair.c_str(), r.worst.ratio, r.greedy.text().c_str(), r.solo_worst.ratio,
                  r.solo.text().c_str(), sampled.c_str(), tree, r.seconds, ok ? "ok" : "FAIL",
                  r.error.empty() ? "" : (" (" + r.error + ")").c_str());
      if (r.worst.ratio > 1.0) std::printf("  worst: %s\n", r.worst.where.c_str());
      if (r.solo_worst.ratio > 1.0) std::printf("  worst alone: %s\n", r.solo_worst.where.c_str());
      if (r.drafts.same != r.drafts.total)
        std::printf("  drafts: %lld of %lld heads' ids are the first maximum of their logits\n",
                    static_cast<long long>(r.drafts.same), static_cast<long long>(r.drafts.total));
      std::fflush(stdout);
    }
  }
  return all_ok;
}

}  // namespace loom_check
