// The kernel self-test: every op of a device against the scalar reference on a seeded grid.
//
// Shapes come from real models (hidden 576 SmolLM2-135M, 896 Qwen2-0.5B, 2048 Llama-3.2-1B,
// head dims 64/128, GQA 9/3, 14/2, 32/8), batch sizes 1..33, LoRA ranks 1..128 and adapter mixes
// (distinct, identical, uniform, skewed, and rows with no adapter). Each comparison checks
// |x - ref| <= atol + rtol*|ref| element-wise and reports the worst ratio per op family, so a
// failure names its op, dtype and every dimension. A bug fix adds its case to this grid.
#include "selftest/kernel-self-test.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <map>
#include <vector>

namespace loom {
namespace {

// splitmix64: small, seedable, identical on every platform.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) / float(1ull << 24); }
  int range(int lo, int hi) { return lo + int(next() % uint64_t(hi - lo + 1)); }  // inclusive
  template <typename T>
  T pick(std::initializer_list<T> xs) {
    return *(xs.begin() + next() % xs.size());
  }
};

std::vector<float> randn(Rng& rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(-scale, scale);
  return v;
}

struct Checker {
  SelfTestResult* res;
  std::map<std::string, std::pair<double, std::string>> worst;  // family -> (ratio, case)

  void compare(const std::string& family, const std::string& what, const float* x, const float* ref, size_t n,
               double atol, double rtol) {
    double ratio = 0, err_at = 0;
    for (size_t i = 0; i < n; i++) {
      const double err = std::fabs(double(x[i]) - double(ref[i]));
      const double r = std::isfinite(x[i]) ? err / (atol + rtol * std::fabs(double(ref[i]))) : 1e30;
      if (r > ratio) {
        ratio = r;
        err_at = err;
      }
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, " worst |x-ref| %.3g (%.2f of bound)", err_at, ratio);
    const std::string line = what + buf;
    res->cases++;
    if (ratio > 1.0) {
      res->ok = false;
      res->failures++;
    }
    auto& w = worst[family];
    if (ratio >= w.first) w = {ratio, line};
    if (ratio >= res->worst_ratio) {
      res->worst_ratio = ratio;
      res->worst_case = line;
    }
  }
};

// A weight matrix stored in the given dtype, plus the f32 values the reference sees.
struct TestWeight {
  std::vector<uint16_t> half;
  std::vector<float> f32;
  WeightView view(DType dt, int64_t rows, int64_t cols) const {
    return {dt == DType::F32 ? static_cast<const void*>(f32.data()) : half.data(), dt, rows, cols};
  }
};

TestWeight make_weight(Rng& rng, DType dt, int64_t rows, int64_t cols, float scale = 0.5f) {
  TestWeight w;
  w.f32 = randn(rng, size_t(rows * cols), scale);
  if (dt != DType::F32) {
    w.half.resize(w.f32.size());
    for (size_t i = 0; i < w.f32.size(); i++) w.half[i] = dt == DType::BF16 ? f32_to_bf16(w.f32[i]) : f32_to_f16(w.f32[i]);
  }
  return w;
}

std::string dims(const char* op, std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s = op;
  for (auto& p : kv) s += std::string(" ") + p.first + "=" + std::to_string(p.second);
  return s;
}

// matmul in every weight dtype. K covers real hidden sizes and tails (100 % 16 = 4, 24 % 16 = 8:
// the masked AVX-512 tail); T covers one decode row, the in-register bf16/f16 path (T <= 8),
// the widened-tile path (T = 9, 33) and more than one token tile (70 > 64). Several jobs in one
// call check the shared row-block work list; bias and accumulate are drawn at random.
void test_matmul(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t K : {576, 896, 2048, 100, 24})
      for (int64_t T : {1, 2, 3, 8, 9, 33, 70}) {
        const int njobs = rng.range(1, 3);
        const bool acc = rng.next() & 1;
        std::vector<TestWeight> ws;
        std::vector<std::vector<float>> bias, y0, y1;
        std::vector<int64_t> Ns;
        for (int j = 0; j < njobs; j++) {
          const int64_t N = rng.pick<int64_t>({1, 5, 64, 131, 192});
          Ns.push_back(N);
          ws.push_back(make_weight(rng, dt, N, K));
          bias.push_back(rng.next() & 1 ? randn(rng, size_t(N)) : std::vector<float>());
          y0.push_back(randn(rng, size_t(T * (N + 3))));
          y1.push_back(y0.back());
        }
        const int64_t ldx = K + 5;
        auto x = randn(rng, size_t(T * ldx));
        std::vector<MatmulJob> j0, j1;
        for (int j = 0; j < njobs; j++) {
          const float* b = bias[size_t(j)].empty() ? nullptr : bias[size_t(j)].data();
          j0.push_back({ws[size_t(j)].view(dt, Ns[size_t(j)], K), b, y0[size_t(j)].data(), Ns[size_t(j)] + 3});
          j1.push_back({ws[size_t(j)].view(dt, Ns[size_t(j)], K), b, y1[size_t(j)].data(), Ns[size_t(j)] + 3});
        }
        dev->matmul(x.data(), T, ldx, j0.data(), njobs, acc);
        ref->matmul(x.data(), T, ldx, j1.data(), njobs, acc);
        for (int j = 0; j < njobs; j++)
          ck.compare("matmul", dims((std::string("matmul ") + dtype_name(dt)).c_str(),
                                    {{"T", T}, {"N", Ns[size_t(j)]}, {"K", K}, {"jobs", njobs}, {"acc", acc}}),
                     y0[size_t(j)].data(), y1[size_t(j)].data(), y0[size_t(j)].size(), 1e-5 * std::sqrt(double(K)), 1e-4);
      }
}

// rmsnorm, rope, silu (large |gate| reaches exp's clamps), embedding per dtype (exact) and argmax
// (exact, first maximum) at real hidden sizes, head dims and vocabulary size.
void test_elementwise(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (int64_t H : {576, 896, 2048, 4096})
    for (int64_t T : {1, 5, 33}) {
      auto x = randn(rng, size_t(T * H), 3.0f), w = randn(rng, size_t(H));
      std::vector<float> a(size_t(T * H)), b(size_t(T * H));
      dev->rmsnorm(x.data(), T, H, H, w.data(), 1e-5f, a.data(), H);
      ref->rmsnorm(x.data(), T, H, H, w.data(), 1e-5f, b.data(), H);
      ck.compare("rmsnorm", dims("rmsnorm", {{"T", T}, {"H", H}}), a.data(), b.data(), a.size(), 1e-6, 1e-5);
    }
  for (int D : {64, 128, 80})
    for (int64_t T : {1, 7, 40}) {
      const int heads = rng.pick({2, 9, 14});
      const int64_t ld = int64_t(heads) * D + 16;
      auto x = randn(rng, size_t(T * ld), 2.0f);
      auto y = x;
      std::vector<float> c(size_t(T * D / 2)), s(c.size());
      for (size_t i = 0; i < c.size(); i++) {
        const double ang = rng.uniform(0, 1000);
        c[i] = float(std::cos(ang));
        s[i] = float(std::sin(ang));
      }
      dev->rope(x.data(), T, ld, heads, D, c.data(), s.data());
      ref->rope(y.data(), T, ld, heads, D, c.data(), s.data());
      ck.compare("rope", dims("rope", {{"T", T}, {"heads", heads}, {"D", D}}), x.data(), y.data(), x.size(), 1e-6, 1e-5);
    }
  for (int64_t n : {1, 100, 1536, 50000}) {
    auto g = randn(rng, size_t(n), 20.0f), u = randn(rng, size_t(n), 2.0f);
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    dev->silu_mul(g.data(), u.data(), n, a.data());
    ref->silu_mul(g.data(), u.data(), n, b.data());
    ck.compare("silu", dims("silu_mul", {{"n", n}}), a.data(), b.data(), a.size(), 1e-6, 1e-5);
    a = u;
    b = u;
    dev->silu_residual(g.data(), n, a.data());
    ref->silu_residual(g.data(), n, b.data());
    ck.compare("silu", dims("silu_residual", {{"n", n}}), a.data(), b.data(), a.size(), 1e-6, 1e-5);
  }
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const int64_t V = 301, H = 576, T = 9;
    TestWeight table = make_weight(rng, dt, V, H);
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = rng.range(0, int(V) - 1);
    std::vector<float> a(size_t(T * H)), b(size_t(T * H));
    dev->embedding(ids.data(), T, table.view(dt, V, H), a.data());
    ref->embedding(ids.data(), T, table.view(dt, V, H), b.data());
    ck.compare("embedding", dims((std::string("embedding ") + dtype_name(dt)).c_str(), {{"T", T}, {"H", H}}), a.data(),
               b.data(), a.size(), 0, 0);
  }
  {
    const int64_t T = 5, V = 49152;
    auto x = randn(rng, size_t(T * V));
    // Row 1: the maximum twice (the first wins); row 2: NaNs inside; row 3: NaN first (index 0,
    // as the reference's scan); row 4: all -inf.
    x[size_t(V + 700)] = x[size_t(V + 40000)] = 50.0f;
    for (int64_t i = 3; i < V; i += 97) x[size_t(2 * V + i)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(3 * V)] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < V; i++) x[size_t(4 * V + i)] = -std::numeric_limits<float>::infinity();
    std::vector<int32_t> a(T), b(T);
    dev->argmax(x.data(), T, V, V, a.data());
    ref->argmax(x.data(), T, V, V, b.data());
    std::vector<float> fa(a.begin(), a.end()), fb(b.begin(), b.end());
    ck.compare("argmax", dims("argmax", {{"T", T}, {"V", V}}), fa.data(), fb.data(), fa.size(), 0, 0);
  }
  // top_k: random rows, a row with ties and NaNs, a row with fewer non-NaN values than K, and
  // (for K = 1) a row of NaN then -inf only.
  {
    const int64_t T = 4, V = 2053;
    const int K = 10;
    auto x = randn(rng, size_t(T * V));
    for (int64_t i = 0; i < V; i += 5) x[size_t(V + i)] = 3.0f;
    for (int64_t i = 1; i < V; i += 7) x[size_t(V + i)] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 4; i < V; i++) x[size_t(3 * V + i)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(3 * V)] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 1; i < 4; i++) x[size_t(3 * V + i)] = -std::numeric_limits<float>::infinity();
    for (const int k : {K, 1}) {  // K = 1 takes its own vector path
      std::vector<int32_t> a(size_t(T * k)), b(size_t(T * k));
      dev->top_k(x.data(), T, V, V, k, a.data());
      ref->top_k(x.data(), T, V, V, k, b.data());
      std::vector<float> fa(a.begin(), a.end()), fb(b.begin(), b.end());
      ck.compare("top_k", dims("top_k", {{"T", T}, {"V", V}, {"K", k}}), fa.data(), fb.data(), fa.size(), 0, 0);
    }
  }
  // log_sum_exp: logit-like rows (scaled so one token dominates some rows), a vocabulary that is
  // not a multiple of the vector width, a row with -inf entries (masked) and one all -inf.
  for (const int64_t V : {int64_t(2048), int64_t(49157)}) {
    const int64_t T = 4;
    auto x = randn(rng, size_t(T * V));
    for (int64_t i = 0; i < V; i++) x[size_t(V + i)] *= 8.0f;
    for (int64_t i = 0; i < V; i += 3) x[size_t(2 * V + i)] = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < V; i++) x[size_t(3 * V + i)] = -std::numeric_limits<float>::infinity();
    std::vector<double> a(T), b(T);
    dev->log_sum_exp(x.data(), T, V, V, a.data());
    ref->log_sum_exp(x.data(), T, V, V, b.data());
    // -inf == -inf, exactly; the finite rows to ~1e-6 relative.
    std::vector<float> fa(size_t(T - 1)), fb(size_t(T - 1));
    for (int64_t t = 0; t < T - 1; t++) {
      fa[size_t(t)] = float(a[size_t(t)]);
      fb[size_t(t)] = float(b[size_t(t)]);
    }
    ck.compare("log_sum_exp", dims("log_sum_exp", {{"T", T - 1}, {"V", V}}), fa.data(), fb.data(), fa.size(), 1e-6,
               1e-6);
    const float all_masked = a[size_t(T - 1)] == b[size_t(T - 1)] ? 0.0f : 1.0f, zero = 0.0f;
    ck.compare("log_sum_exp", dims("log_sum_exp all -inf", {{"V", V}}), &all_masked, &zero, 1, 0, 0);
  }
}

// Paged attention over shuffled block tables: decode rows, prefill chunks with and without
// history, and Medusa-style tree masks, for the GQA layouts of SmolLM2, Qwen2, Llama and MHA,
// with block sizes that divide the context and ones that do not.
void test_attention(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  struct Heads {
    int hq, hkv, d;
  };
  for (Heads hs : {Heads{9, 3, 64}, Heads{14, 2, 64}, Heads{32, 8, 128}, Heads{4, 4, 80}})
    for (int bs : {16, 5})
      for (int nrows : {1, 3, 8}) {
        const int64_t E = int64_t(hs.hkv) * hs.d;
        const int blocks = 400;
        std::vector<int32_t> perm(blocks);
        for (int i = 0; i < blocks; i++) perm[size_t(i)] = i;
        for (int i = blocks - 1; i > 0; i--) std::swap(perm[size_t(i)], perm[size_t(rng.range(0, i))]);
        auto kc = randn(rng, size_t(blocks) * bs * E), vc = randn(rng, size_t(blocks) * bs * E);
        std::vector<AttnRow> rows;
        std::vector<std::vector<uint8_t>> masks;
        int next_block = 0, T = 0;
        masks.reserve(size_t(nrows));
        for (int r = 0; r < nrows; r++) {
          // decode row, prefill chunk (maybe with history), or a Medusa-style tree
          const int kind = rng.range(0, 2);
          const int n = kind == 0 ? 1 : rng.range(2, 24);
          const int cache_len = rng.range(0, 1) ? rng.range(0, 150) : 0;
          const int need = (cache_len + n + bs - 1) / bs;
          AttnRow row{T, n, cache_len, perm.data() + next_block, nullptr};
          next_block += need;
          if (kind == 2) {
            masks.emplace_back(size_t(n * n));
            for (int i = 0; i < n; i++)
              for (int j = 0; j < n; j++) masks.back()[size_t(i * n + j)] = j == i || (j < i && rng.range(0, 2) == 0);
            row.tree_mask = masks.back().data();
          }
          rows.push_back(row);
          T += n;
        }
        const int64_t ldq = int64_t(hs.hq) * hs.d + int64_t(2 * E);
        auto q = randn(rng, size_t(T * ldq), 2.0f);
        std::vector<float> a(size_t(T) * hs.hq * hs.d), b(a.size());
        const AttnShape shape{hs.hq, hs.hkv, hs.d, bs, float(1.0 / std::sqrt(double(hs.d)))};
        dev->attention(q.data(), ldq, kc.data(), vc.data(), rows.data(), nrows, shape, a.data());
        ref->attention(q.data(), ldq, kc.data(), vc.data(), rows.data(), nrows, shape, b.data());
        ck.compare("attention",
                   dims("attention", {{"rows", nrows}, {"T", T}, {"Hq", hs.hq}, {"Hkv", hs.hkv}, {"D", hs.d}, {"bs", bs}}),
                   a.data(), b.data(), a.size(), 1e-5, 1e-4);
      }
}

// SGMV/BGMV shrink and expand over the adapter mixes of STYLE.md item 10, with adapters stored
// in f32 and in bf16/f16 (16-bit models keep their adapters in the model's dtype). Batches >= 8
// with distinct adapters take the expand's split-by-segment path, smaller ones the
// split-by-feature path; ranks 1..128 mix within a batch (rank tails of the 4-row expand groups);
// some rows are prefill segments.
void test_lora(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  const char* mixes[] = {"distinct", "identical", "uniform", "skewed", "none-mixed"};
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
  for (int mix = 0; mix < 5; mix++)
    for (int batch : {1, 2, 7, 16, 33})
      for (int rank : {1, 4, 8, 16, 32, 64, 128}) {
        const int64_t K = rng.pick<int64_t>({576, 896, 2048}), N = rng.pick<int64_t>({576, 192, 1536});
        // Adapter pool: ranks vary around `rank` so one batch mixes ranks.
        const int nadapters = mix == 1 ? 1 : mix == 2 ? std::max(1, int(std::sqrt(double(batch)))) : batch;
        std::vector<TestWeight> A, B;
        std::vector<int> ranks;
        for (int a = 0; a < nadapters; a++) {
          const int r = std::max(1, std::min(128, a % 2 ? rank : rng.range(1, rank)));
          ranks.push_back(r);
          A.push_back(make_weight(rng, dt, r, K, 0.1f));
          B.push_back(make_weight(rng, dt, r, N, 0.1f));
        }
        // Rows: a mix of decode rows (1 token) and prefill segments; some without adapter.
        std::vector<LoraSegment> sh, ex;
        int T = 0;
        for (int row = 0; row < batch; row++) {
          const int n = rng.range(0, 3) == 0 ? rng.range(2, 40) : 1;
          int a;
          if (mix == 3)  // skewed: most rows on adapter 0
            a = rng.range(0, 3) ? 0 : rng.range(0, nadapters - 1);
          else
            a = mix == 0 ? row % nadapters : rng.range(0, nadapters - 1);
          const bool none = mix == 4 && rng.range(0, 2) == 0;
          if (!none) {
            const int col = rng.range(0, 2) * 0;  // single module per call here
            const int r = ranks[size_t(a)];
            sh.push_back({T, n, A[size_t(a)].view(dt, r, K).data, dt, r, col, 1.0f});
            ex.push_back({T, n, B[size_t(a)].view(dt, r, N).data, dt, r, col, rng.uniform(0.1f, 4.0f)});
          }
          T += n;
        }
        const int64_t ldx = K + 3, ldt = 3 * 128, ldy = N + 1;
        auto x = randn(rng, size_t(T * ldx));
        std::vector<float> t0(size_t(T * ldt), 0.0f), t1(t0.size(), 0.0f);
        dev->lora_shrink(x.data(), ldx, K, sh.data(), int(sh.size()), t0.data(), ldt);
        ref->lora_shrink(x.data(), ldx, K, sh.data(), int(sh.size()), t1.data(), ldt);
        const std::string what = std::string(mixes[mix]) + " " + dtype_name(dt);
        ck.compare("lora_shrink", dims(("lora_shrink " + what).c_str(), {{"batch", batch}, {"T", T}, {"rank", rank}, {"K", K}}),
                   t0.data(), t1.data(), t0.size(), 1e-5 * std::sqrt(double(K)), 1e-4);
        auto y0 = randn(rng, size_t(T * ldy));
        auto y1 = y0;
        dev->lora_expand(t1.data(), ldt, N, ex.data(), int(ex.size()), y0.data(), ldy);
        ref->lora_expand(t1.data(), ldt, N, ex.data(), int(ex.size()), y1.data(), ldy);
        ck.compare("lora_expand", dims(("lora_expand " + what).c_str(), {{"batch", batch}, {"T", T}, {"rank", rank}, {"N", N}}),
                   y0.data(), y1.data(), y0.size(), 1e-5 * std::sqrt(double(rank)), 1e-4);
      }
  // Several modules shrunk into side-by-side columns in one call (q|k|v), mixed with no-adapter rows.
  {
    const int64_t K = 576, ldt = 3 * 128;
    std::vector<std::vector<float>> A;
    std::vector<LoraSegment> sh;
    int T = 0;
    for (int row = 0; row < 12; row++) {
      const int n = row % 4 == 0 ? 17 : 1;
      if (row % 3 != 2) {
        int col = 0;
        for (int m = 0; m < 3; m++) {
          const int r = rng.range(1, 128);
          A.push_back(randn(rng, size_t(r * K), 0.1f));
          sh.push_back({T, n, A.back().data(), DType::F32, r, col, 1.0f});
          col += r;
        }
      }
      T += n;
    }
    auto x = randn(rng, size_t(T * K));
    std::vector<float> t0(size_t(T * ldt), 0.0f), t1(t0.size(), 0.0f);
    dev->lora_shrink(x.data(), K, K, sh.data(), int(sh.size()), t0.data(), ldt);
    ref->lora_shrink(x.data(), K, K, sh.data(), int(sh.size()), t1.data(), ldt);
    ck.compare("lora_shrink", dims("lora_shrink qkv-columns", {{"T", T}, {"K", K}}), t0.data(), t1.data(), t0.size(),
               1e-5 * std::sqrt(double(K)), 1e-4);
  }
}

// lora_apply: per adapter run, the shrink of a group's modules (q|k|v-like: 1-3 modules side by
// side in the scratch, each with its own output width) and their expands; few runs take the
// two-op path, many runs the one-region path (one-token runs: the decode-row shrink, 8 rows of A
// at a time, so ranks 7, 12, 33 leave tails); rows without adapter, prefill runs, mixed ranks, a
// K with a vector tail (100 % 16 = 4).
void test_lora_apply(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int batch : {2, 9, 33}) {
      const int64_t K = rng.pick<int64_t>({576, 896, 100}), ldt = 3 * 128;
      const int nmod = rng.range(1, 3);
      const int64_t Ns[3] = {576, 192, 1536};
      std::vector<TestWeight> A, B;
      std::vector<LoraSegment> sh, ex;
      std::vector<int> mod;
      A.reserve(size_t(batch * 3));
      B.reserve(size_t(batch * 3));
      int T = 0;
      for (int row = 0; row < batch; row++) {
        const int n = rng.range(0, 4) == 0 ? rng.range(2, 30) : 1;
        if (rng.range(0, 4) != 0) {  // this row has an adapter
          int col = 0;
          for (int m = 0; m < nmod; m++) {
            const int r = rng.pick({1, 4, 7, 12, 16, 33, 64});
            A.push_back(make_weight(rng, dt, r, K, 0.1f));
            B.push_back(make_weight(rng, dt, r, Ns[m], 0.1f));
            sh.push_back({T, n, A.back().view(dt, r, K).data, dt, r, col, 1.0f});
            ex.push_back({T, n, B.back().view(dt, r, Ns[m]).data, dt, r, col, rng.uniform(0.1f, 4.0f)});
            mod.push_back(m);
            col += r;
          }
        }
        T += n;
      }
      auto x = randn(rng, size_t(T * K));
      std::vector<std::vector<float>> y0, y1;
      LoraOutput o0[3], o1[3];
      for (int m = 0; m < nmod; m++) {
        y0.push_back(randn(rng, size_t(T * (Ns[m] + 2))));
        y1.push_back(y0.back());
      }
      for (int m = 0; m < nmod; m++) {
        o0[m] = {y0[size_t(m)].data(), Ns[m] + 2, Ns[m]};
        o1[m] = {y1[size_t(m)].data(), Ns[m] + 2, Ns[m]};
      }
      std::vector<float> t0(size_t(T * ldt)), t1(t0.size());
      dev->lora_apply(x.data(), K, K, sh.data(), ex.data(), mod.data(), int(sh.size()), o0, t0.data(), ldt);
      ref->lora_apply(x.data(), K, K, sh.data(), ex.data(), mod.data(), int(sh.size()), o1, t1.data(), ldt);
      for (int m = 0; m < nmod; m++)
        ck.compare("lora_apply", dims((std::string("lora_apply ") + dtype_name(dt)).c_str(),
                                      {{"batch", batch}, {"T", T}, {"modules", nmod}, {"module", m}, {"N", Ns[m]}, {"K", K}}),
                   y0[size_t(m)].data(), y1[size_t(m)].data(), y0[size_t(m)].size(), 1e-5 * std::sqrt(double(K)), 1e-4);
    }
}

// kv_store then kv_copy (with overlapping from/to slots, where order matters): exact.
void test_cache(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  const int64_t E = 192, S = 64, T = 9, ldk = 3 * E;
  auto k = randn(rng, size_t(T * ldk));
  std::vector<int32_t> slot(T), from(6), to(6);
  for (int64_t t = 0; t < T; t++) slot[size_t(t)] = int32_t((t * 7) % S);
  for (int i = 0; i < 6; i++) {
    from[size_t(i)] = rng.range(0, int(S) - 1);
    to[size_t(i)] = rng.range(0, int(S) - 1);
  }
  auto kc0 = randn(rng, size_t(S * E)), vc0 = randn(rng, size_t(S * E));
  auto kc1 = kc0, vc1 = vc0;
  dev->kv_store(k.data(), k.data() + E, T, ldk, slot.data(), E, kc0.data(), vc0.data());
  ref->kv_store(k.data(), k.data() + E, T, ldk, slot.data(), E, kc1.data(), vc1.data());
  dev->kv_copy(from.data(), to.data(), 6, E, kc0.data(), vc0.data());
  ref->kv_copy(from.data(), to.data(), 6, E, kc1.data(), vc1.data());
  ck.compare("kv_cache", "kv_store+kv_copy K", kc0.data(), kc1.data(), kc0.size(), 0, 0);
  ck.compare("kv_cache", "kv_store+kv_copy V", vc0.data(), vc1.data(), vc0.size(), 0, 0);
}

}  // namespace

SelfTestResult run_kernel_self_test(Device* device, uint64_t seed) {
  SelfTestResult res;
  Checker ck{&res, {}};
  Rng rng{seed};
  Device* ref = reference_device();
  test_matmul(device, ref, rng, ck);
  test_elementwise(device, ref, rng, ck);
  test_attention(device, ref, rng, ck);
  test_lora(device, ref, rng, ck);
  test_lora_apply(device, ref, rng, ck);
  test_cache(device, ref, rng, ck);
  for (auto& kv : ck.worst) res.report += kv.first + ": " + kv.second.second + "\n";
  return res;
}

}  // namespace loom
