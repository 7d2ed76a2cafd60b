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
#include <cstring>
#include <iterator>
#include <map>
#include <vector>

#include "runtime/device-buffer.h"
#include "runtime/huge-page-arena.h"
#include "runtime/quantize-q8.h"
#include "cpu/simd-config.h"
#if LOOM_AMX_BF16
#include "cpu/intrinsics.h"
#include "cpu/matmul-bf16-amx.h"
#endif

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

  // extra: null, or a per-element allowance added to the bound (a stated rounding of the inputs).
  void compare(const std::string& family, const std::string& what, const float* x, const float* ref, size_t n,
               double atol, double rtol, const double* extra = nullptr) {
    double ratio = 0, err_at = 0;
    for (size_t i = 0; i < n; i++) {
      const double err = std::fabs(double(x[i]) - double(ref[i]));
      const double bound = atol + rtol * std::fabs(double(ref[i])) + (extra ? extra[i] : 0.0);
      const double r = std::isfinite(x[i]) ? err / bound : 1e30;
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

// Host arrays into the device's memory and back, so a test runs the same on a device whose
// memory is not the host's. A failed allocation leaves an empty buffer (the test then fails).
template <typename T>
DeviceBuffer<T> put(Device* dev, const T* host, size_t n) {
  DeviceBuffer<T> buf;
  if (buf.allocate(dev, std::max<int64_t>(1, int64_t(n)), "self-test").ok() && n > 0)
    dev->upload(buf.data(), host, int64_t(n * sizeof(T)));
  return buf;
}
template <typename T>
DeviceBuffer<T> put(Device* dev, const std::vector<T>& host) {
  return put(dev, host.data(), host.size());
}
// A test weight's bytes in `dt` (the f32 values or their 16-bit rounding).
DeviceBuffer<uint8_t> put_weight(Device* dev, const TestWeight& w, DType dt) {
  if (dt == DType::F32) return put(dev, reinterpret_cast<const uint8_t*>(w.f32.data()), w.f32.size() * 4);
  return put(dev, reinterpret_cast<const uint8_t*>(w.half.data()), w.half.size() * 2);
}
// f32 values as the bytes of a `dt` array (rounded to nearest even), and back to f32.
std::vector<uint8_t> to_dtype(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> out(v.size() * size_t(dtype_size(dt)));
  if (dt == DType::F32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    uint16_t* h = reinterpret_cast<uint16_t*>(out.data());
    for (size_t i = 0; i < v.size(); i++) h[i] = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  }
  return out;
}
std::vector<float> widen(const std::vector<uint8_t>& bytes, DType dt) {
  std::vector<float> out(bytes.size() / size_t(dtype_size(dt)));
  for (size_t i = 0; i < out.size(); i++) out[i] = load_weight(bytes.data(), dt, int64_t(i));
  return out;
}
// The first device fault any wait reported (the self-test fails with it; see run_kernel_self_test).
Status g_fault;

template <typename T>
std::vector<T> get(Device* dev, const DeviceBuffer<T>& buf, size_t n) {
  std::vector<T> host(n);
  if (buf.data() != nullptr && n > 0) dev->download(host.data(), buf.data(), int64_t(n * sizeof(T)));
  const Status st = dev->synchronize();
  if (!st.ok() && g_fault.ok()) g_fault = st;
  return host;
}
// Integer results compared exactly, as floats (exact below 2^24).
template <typename T>
void compare_exact(Checker& ck, const std::string& family, const std::string& what, const std::vector<T>& a,
                   const std::vector<T>& b) {
  std::vector<float> fa(a.begin(), a.end()), fb(b.begin(), b.end());
  ck.compare(family, what, fa.data(), fb.data(), fa.size(), 0, 0);
}

std::string dims(const char* op, std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s = op;
  for (auto& p : kv) s += std::string(" ") + p.first + "=" + std::to_string(p.second);
  return s;
}

// How the activations of a matmul case are drawn: uniform random, or values a device that rounds
// activations represents exactly (bf16 values; int8 blocks q·d with d a power of two and one
// |q| = 127 per block of 32), so that case is held to the f32 tolerance with no allowance.
enum class XKind { Random, Representable };

std::vector<float> matmul_x(Rng& rng, DType dt, int64_t T, int64_t ldx, int64_t K, XKind kind) {
  auto x = randn(rng, size_t(T * ldx));
  if (kind == XKind::Random) return x;
  for (int64_t t = 0; t < T; t++) {
    float* row = x.data() + t * ldx;
    if (dt == DType::BF16) {
      for (int64_t k = 0; k < K; k++) row[k] = bf16_to_f32(f32_to_bf16(row[k]));
      continue;
    }
    for (int64_t b = 0; b < K; b += kQ8Block) {
      const float d = std::ldexp(1.0f, rng.range(-12, -4));
      for (int64_t k = b; k < b + kQ8Block && k < K; k++) row[k] = d * float(rng.range(-127, 127));
      row[b + int64_t(rng.next() % kQ8Block)] = d * (rng.next() & 1 ? 127.0f : -127.0f);
    }
  }
  return x;
}

// matmul jobs placed on a device: weights `bytes[j]` [Ns[j], K] in dt, biases (empty: none) and
// outputs y0[j] [T, Ns[j] + 3] copied in; the buffers live as long as this.
struct PlacedJobs {
  std::vector<DeviceBuffer<uint8_t>> w;
  std::vector<DeviceBuffer<float>> bias, y;
  std::vector<MatmulJob> jobs;
};
PlacedJobs place_jobs(Device* d, DType dt, int64_t K, const std::vector<std::vector<uint8_t>>& bytes,
                      const std::vector<std::vector<float>>& bias, const std::vector<std::vector<float>>& y0,
                      const std::vector<int64_t>& Ns) {
  PlacedJobs p;
  for (size_t j = 0; j < Ns.size(); j++) {
    p.w.push_back(put(d, bytes[j].data(), bytes[j].size()));
    p.bias.push_back(bias[j].empty() ? DeviceBuffer<float>() : put(d, bias[j]));
    p.y.push_back(put(d, y0[j]));
    p.jobs.push_back({{p.w.back().data(), dt, Ns[j], K}, p.bias.back().data(), p.y.back().data(), Ns[j] + 3});
  }
  return p;
}

// One matmul case: njobs weights [N_j, K] stored in `dt` (bytes[j]; deq[j] their f32 values as
// the reference reads them), x [T, ldx = K + ldx_pad] (the default pad leaves rows unaligned; 0
// takes the cuda kernels' 16-byte paths over x). Bias and accumulate drawn at random. The bound adds,
// for random x, what a device that rounds the activations may lose (see the matmul_bf16_dot and
// matmul_q8 files): bf16 2^-9·Σ|x_k·w_k|; Q8 Σ_b max|x_b|/254 · Σ_{k in b}|w_k|.
void matmul_case(Device* dev, Device* ref, Rng& rng, Checker& ck, const char* family, DType dt, int64_t T, int64_t K,
                 const std::vector<std::vector<uint8_t>>& bytes, const std::vector<std::vector<float>>& deq,
                 const std::vector<int64_t>& Ns, XKind kind, int64_t ldx_pad = 5) {
  const int njobs = int(Ns.size());
  const bool acc = rng.next() & 1;
  std::vector<std::vector<float>> bias, y0, out[2];
  for (int j = 0; j < njobs; j++) {
    bias.push_back(rng.next() & 1 ? randn(rng, size_t(Ns[j])) : std::vector<float>());
    y0.push_back(randn(rng, size_t(T * (Ns[j] + 3))));
  }
  const int64_t ldx = K + ldx_pad;
  const auto x = matmul_x(rng, dt, T, ldx, K, kind);
  for (int side = 0; side < 2; side++) {
    Device* d = side ? ref : dev;
    auto xb = put(d, x);
    const PlacedJobs p = place_jobs(d, dt, K, bytes, bias, y0, Ns);
    d->matmul(xb.data(), T, ldx, p.jobs.data(), njobs, acc);
    for (size_t j = 0; j < size_t(njobs); j++) out[side].push_back(get(d, p.y[j], y0[j].size()));
  }
  for (size_t j = 0; j < size_t(njobs); j++) {
    const int64_t N = Ns[j];
    std::vector<double> extra(out[0][j].size(), 0.0);
    if (kind == XKind::Random && (dt == DType::BF16 || dt == DType::Q8))
      for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
          double e = 0;
          for (int64_t b = 0; b < K; b += kQ8Block) {
            double amax = 0, wsum = 0, xw = 0;
            for (int64_t k = b; k < std::min(K, b + kQ8Block); k++) {
              const double xv = x[size_t(t * ldx + k)], wv = deq[j][size_t(n * K + k)];
              amax = std::max(amax, std::fabs(xv));
              wsum += std::fabs(wv);
              xw += std::fabs(xv * wv);
            }
            e += dt == DType::Q8 ? amax / 254.0 * wsum : std::ldexp(xw, -9);
          }
          extra[size_t(t * (N + 3) + n)] = e;
        }
    ck.compare(family,
               dims((std::string("matmul ") + dtype_name(dt) + (kind == XKind::Random ? "" : " representable x")).c_str(),
                    {{"T", T}, {"N", N}, {"K", K}, {"jobs", njobs}, {"acc", acc}}),
               out[0][j].data(), out[1][j].data(), out[0][j].size(), 1e-5 * std::sqrt(double(K)), 1e-4, extra.data());
  }
}

// The cuda device's prefill GEMMs (cuda/prefill-gemm-kernels.cuh, and on sm_90a
// cuda/wgmma-gemm-kernels.cuh) take bf16 jobs only when their tiles (128x128, 128x256) would fill
// half a GPU's SMs, which none of test_matmul's shapes do on a real GPU (the emulator runs them as
// one SM, where they do). So on the cuda device: prompt-sized jobs at tile tails in every
// dimension (T 300, 129 and 257, N 4096, 8320 + 5 and 8200, K 576, 1000 and 520: 1000 % 32 = 8,
// 520 % 64 = 8), with bf16-representable x (held to the f32 tolerance) and, for the first and the
// last, random x. With 132 SMs (H100, H200) the first takes the mma.sync kernel and the last two
// the wgmma one (unless LOOM_CUDA_DISABLE has `wgmma`, or the build has no sm_90a image). Its own
// seed: the rest of its family's seeded cases stay the same on every device.
void test_matmul_prefill_gemm(Device* dev, Device* ref, Checker& ck) {
  if (std::string(dev->name()) != "cuda") return;
  Rng rng{0x9f111};
  struct Shape {
    int64_t T, N, K;
  };
  for (const Shape& s : {Shape{300, 4096, 576}, Shape{129, 8325, 1000}, Shape{257, 8200, 520}})
    for (XKind kind : {XKind::Random, XKind::Representable}) {
      if (kind == XKind::Random && s.T == 129) continue;
      const TestWeight w = make_weight(rng, DType::BF16, s.N, s.K);
      const std::vector<std::vector<uint8_t>> bytes{to_dtype(w.f32, DType::BF16)};
      const std::vector<std::vector<float>> deq{widen(bytes[0], DType::BF16)};
      matmul_case(dev, ref, rng, ck, "matmul", DType::BF16, s.T, s.K, bytes, deq, {s.N}, kind);
    }
}

// The wgmma GEMMs' tiling (cuda/wgmma-gemm-kernels.cuh) on the emulator, where test_matmul's
// prompt-sized jobs are one tile: 2 x 2 tiles (T 200, N 300) with K of 3 k-tiles (fewer than the
// stages) and of 9 (the stages' barrier phases wrap twice), each shape 8 times in a row so that
// the emulated device's alternation of SM counts and kernel paths gives the TMA-fed, the
// cp.async-fed and the mma.sync prefill GEMM their turns; every other case has aligned rows of x
// (round_x_bf16_kernel's 16-byte path). Its own seed, as test_matmul_prefill_gemm's.
void test_matmul_wgmma_tiles(Device* dev, Device* ref, Checker& ck) {
  if (std::string(dev->name()) != "emulated-cuda") return;
  Rng rng{0x3a90a};
  for (int64_t K : {136, 520})
    for (int rep = 0; rep < 8; rep++) {
      const TestWeight w = make_weight(rng, DType::BF16, 300, K);
      const std::vector<std::vector<uint8_t>> bytes{to_dtype(w.f32, DType::BF16)};
      const std::vector<std::vector<float>> deq{widen(bytes[0], DType::BF16)};
      matmul_case(dev, ref, rng, ck, "matmul", DType::BF16, 200, K, bytes, deq, {300}, XKind::Random,
                  rep % 2 ? 5 : 0);
    }
}

// The cuda device's skinny GEMM (cuda/skinny-gemm-kernels.cuh) on decode batches of every token
// fragment count it is built for: T 5 and 12 (one and two fragments, one row tile per warp), 24
// and 32 (two row tiles), in both 16-bit dtypes, with N past a block's rows (200) and K with a
// 32-column tail (1000) or enough columns for several K slices on an H100 (2048). On the cuda
// device and its emulator only: other devices have no such path. x's rows are aligned at K 2048
// (split_x_kernel's 16-byte path), not at 1000. Its own seed, as test_matmul_prefill_gemm's.
void test_matmul_skinny_gemm(Device* dev, Device* ref, Checker& ck) {
  const std::string name = dev->name();
  if (name != "cuda" && name != "emulated-cuda") return;
  Rng rng{0x5c1a7};
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t T : {5, 12, 24, 32})
      for (int64_t K : {1000, 2048}) {
        const int64_t N = T == 32 ? 70 : 200;
        const TestWeight w = make_weight(rng, dt, N, K);
        const std::vector<std::vector<uint8_t>> bytes{to_dtype(w.f32, dt)};
        const std::vector<std::vector<float>> deq{widen(bytes[0], dt)};
        matmul_case(dev, ref, rng, ck, "matmul", dt, T, K, bytes, deq, {N}, XKind::Random, K == 2048 ? 0 : 5);
      }
}

// matmul in every weight dtype. K covers real hidden sizes and tails (100 % 16 = 4, 24 % 16 = 8:
// the masked AVX-512 tail; 100 % 32 = 4 for the bf16 dot path); T covers one decode row, the
// few-token path and the in-register bf16/f16 conversion (T <= 8), the widened-tile path (T = 9), the bf16 dot-product path
// (T >= 64 here: 70) and more than one token tile (70 > 64 with AVX-512, 130 > 128 with AVX2; at K = 576
// and 896 an AVX2 super-block holds 8 row blocks, at 2048 four). bf16 also runs with bf16-representable
// x, which the dot-product path must match as tightly as f32. Several jobs in one call check the
// shared row-block work list; bias and accumulate are drawn at random.
void test_matmul(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  // Token passes are the cpu device's; on the SIMT emulator 130 tokens only cost time.
  const bool cpu = std::string(dev->name()) == "cpu";
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t K : {576, 896, 2048, 100, 24})
      for (int64_t T : {1, 2, 3, 8, 9, 16, 33, 70, 100, 130})
        for (XKind kind : {XKind::Random, XKind::Representable}) {
          if (kind == XKind::Representable && (dt != DType::BF16 || T < 9)) continue;
          if (T == 100 && dt != DType::BF16) continue;  // the bf16 dot path's token tail (100 % 8)
          if (T == 130 && (K > 896 || !cpu)) continue;  // two cpu token passes; the reference's time
          const int njobs = rng.range(1, 3);
          std::vector<std::vector<uint8_t>> bytes;
          std::vector<std::vector<float>> deq;
          std::vector<int64_t> Ns;
          for (int j = 0; j < njobs; j++) {
            const int64_t N = rng.pick<int64_t>({1, 5, 64, 131, 192});
            Ns.push_back(N);
            const TestWeight w = make_weight(rng, dt, N, K);
            bytes.push_back(to_dtype(w.f32, dt));
            deq.push_back(widen(bytes.back(), dt));
          }
          matmul_case(dev, ref, rng, ck, "matmul", dt, T, K, bytes, deq, Ns, kind);
        }
  test_matmul_prefill_gemm(dev, ref, ck);
  test_matmul_wgmma_tiles(dev, ref, ck);
  test_matmul_skinny_gemm(dev, ref, ck);
}

// rmsnorm_matmul, which the cuda device folds into one GEMV launch at 1-4 tokens when the normed
// rows need not be kept (matmul-kernels.cuh: GemvNorm), against the reference's two ops: every
// weight dtype, T 1-4 (each GEMV tokens-per-block) and 5 and 9 (the unfused path), 1-4 jobs with
// random biases, H with a vector tail (100: not fusable) or real widths, x rows aligned or not
// (ldx), a norm weight at an unaligned address (not fusable), and xn kept or not, in its own
// buffer or in place (kept in place: not fusable). x is scaled by 3 so the norm's scale matters.
// Kept xn is held to rmsnorm's bounds.
void test_rmsnorm_matmul(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t H : {576, 2048, 100})
      for (int64_t T : {1, 2, 3, 4, 5, 9}) {
        const bool keep = rng.next() & 1, misaligned_w = rng.range(0, 5) == 0, in_place = rng.range(0, 3) == 0;
        const int64_t ldx = in_place ? H : H + (rng.next() & 1 ? 4 : 5);
        const int njobs = rng.range(1, 4);
        std::vector<std::vector<uint8_t>> bytes;
        std::vector<std::vector<float>> bias, y0, out[2];
        std::vector<int64_t> Ns;
        for (int j = 0; j < njobs; j++) {
          Ns.push_back(rng.pick<int64_t>({1, 64, 131}));
          bytes.push_back(to_dtype(make_weight(rng, dt, Ns[size_t(j)], H).f32, dt));
          bias.push_back(rng.next() & 1 ? randn(rng, size_t(Ns[size_t(j)])) : std::vector<float>());
          y0.push_back(randn(rng, size_t(T * (Ns[size_t(j)] + 3))));
        }
        const auto x = randn(rng, size_t(T * ldx), 3.0f);
        std::vector<float> w = randn(rng, size_t(H) + 1);  // the norm weight from w[misaligned_w]
        std::vector<float> xn[2];
        for (int side = 0; side < 2; side++) {
          Device* d = side ? ref : dev;
          auto xb = put(d, x), wb = put(d, w), xnb = put(d, std::vector<float>(size_t(T * H), 0.0f));
          const PlacedJobs p = place_jobs(d, dt, H, bytes, bias, y0, Ns);
          d->rmsnorm_matmul(xb.data(), T, ldx, wb.data() + (misaligned_w ? 1 : 0), 1e-5f,
                            in_place ? xb.data() : xnb.data(), keep, p.jobs.data(), njobs);
          for (size_t j = 0; j < size_t(njobs); j++) out[side].push_back(get(d, p.y[j], y0[j].size()));
          xn[side] = in_place ? get(d, xb, size_t(T * H)) : get(d, xnb, size_t(T * H));
        }
        for (size_t j = 0; j < size_t(njobs); j++)
          ck.compare("rmsnorm_matmul",
                     dims((std::string("rmsnorm_matmul ") + dtype_name(dt)).c_str(),
                          {{"T", T}, {"N", Ns[j]}, {"H", H}, {"jobs", njobs}, {"keep", keep}, {"ldx", ldx},
                           {"misaligned_w", misaligned_w}, {"in_place", in_place}}),
                     out[0][j].data(), out[1][j].data(), out[0][j].size(), 1e-5 * std::sqrt(double(H)), 1e-4);
        if (keep)
          ck.compare("rmsnorm_matmul", dims("rmsnorm_matmul kept xn", {{"T", T}, {"H", H}, {"in_place", in_place}}),
                     xn[0].data(), xn[1].data(), xn[0].size(), 1e-6, 1e-5);
      }
}

// rmsnorm_matmul on prompts whose jobs all take the prefill GEMM (bf16 weights): the cuda device's
// norm then writes that GEMM's bf16 x itself (matmul-kernels.cuh: norm_rounds_prefill_x), and the
// normed rows only when kept. 1-3 jobs over one K, xn kept or not, in its own buffer or in place,
// each shape 6 times in a row so that the emulated device's alternating SMs and kernel paths give
// this route and the two ops, and the wgmma, wgmma+TMA and mma.sync GEMMs, their turns; prompt
// shapes whose tiles fill a real GPU on the cuda device. Bounds as matmul_case's for random x,
// with the bf16 allowance over the normed rows. Its own seed, as test_matmul_prefill_gemm's.
void test_rmsnorm_matmul_prefill(Device* dev, Device* ref, Checker& ck) {
  const std::string name = dev->name();
  if (name != "cuda" && name != "emulated-cuda") return;
  Rng rng{0x7e5a1};
  struct Shape {
    int64_t T, N, H;
  };
  const std::vector<Shape> shapes =
      name == "cuda" ? std::vector<Shape>{{300, 4096, 576}, {257, 8200, 520}} : std::vector<Shape>{{130, 300, 136}};
  for (const Shape& s : shapes)
    for (int rep = 0; rep < 6; rep++) {
      const int64_t T = s.T, H = s.H;
      const bool keep = rep % 3 != 2, in_place = rep % 3 == 1;
      const int64_t ldx = in_place ? H : H + (rep % 2 ? 8 : 5);
      const int njobs = 1 + rep % 3;
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<std::vector<float>> deq, bias, y0, out[2];
      std::vector<int64_t> Ns;
      for (int j = 0; j < njobs; j++) {
        Ns.push_back(j == 0 ? s.N : s.N / 4);
        bytes.push_back(to_dtype(make_weight(rng, DType::BF16, Ns.back(), H).f32, DType::BF16));
        deq.push_back(widen(bytes.back(), DType::BF16));
        bias.push_back(rng.next() & 1 ? randn(rng, size_t(Ns.back())) : std::vector<float>());
        y0.push_back(randn(rng, size_t(T * (Ns.back() + 3))));
      }
      const auto x = randn(rng, size_t(T * ldx), 3.0f);
      const std::vector<float> w = randn(rng, size_t(H));
      std::vector<float> xn[2];
      for (int side = 0; side < 2; side++) {
        Device* d = side ? ref : dev;
        auto xb = put(d, x), wb = put(d, w), xnb = put(d, std::vector<float>(size_t(T * H), 0.0f));
        const PlacedJobs p = place_jobs(d, DType::BF16, H, bytes, bias, y0, Ns);
        d->rmsnorm_matmul(xb.data(), T, ldx, wb.data(), 1e-5f, in_place ? xb.data() : xnb.data(), keep, p.jobs.data(),
                          njobs);
        for (size_t j = 0; j < size_t(njobs); j++) out[side].push_back(get(d, p.y[j], y0[j].size()));
        xn[side] = in_place ? get(d, xb, size_t(T * H)) : get(d, xnb, size_t(T * H));
      }
      // The normed rows (as the reference norms them) for the bf16 allowance.
      std::vector<double> normed(size_t(T * H));
      for (int64_t t = 0; t < T; t++) {
        double ss = 0;
        for (int64_t k = 0; k < H; k++) ss += double(x[size_t(t * ldx + k)]) * x[size_t(t * ldx + k)];
        const double r = 1.0 / std::sqrt(ss / double(H) + 1e-5);
        for (int64_t k = 0; k < H; k++) normed[size_t(t * H + k)] = x[size_t(t * ldx + k)] * r * w[size_t(k)];
      }
      for (size_t j = 0; j < size_t(njobs); j++) {
        const int64_t N = Ns[j];
        std::vector<double> extra(out[0][j].size(), 0.0);
        for (int64_t t = 0; t < T; t++)
          for (int64_t n = 0; n < N; n++) {
            double xw = 0;
            for (int64_t k = 0; k < H; k++) xw += std::fabs(normed[size_t(t * H + k)] * deq[j][size_t(n * H + k)]);
            extra[size_t(t * (N + 3) + n)] = std::ldexp(xw, -9);
          }
        ck.compare("rmsnorm_matmul",
                   dims("rmsnorm_matmul prompt bfloat16",
                        {{"T", T}, {"N", N}, {"H", H}, {"jobs", njobs}, {"keep", keep}, {"in_place", in_place}}),
                   out[0][j].data(), out[1][j].data(), out[0][j].size(), 1e-5 * std::sqrt(double(H)), 1e-4,
                   extra.data());
      }
      if (keep)
        ck.compare("rmsnorm_matmul", dims("rmsnorm_matmul prompt kept xn", {{"T", T}, {"H", H}, {"in_place", in_place}}),
                   xn[0].data(), xn[1].data(), xn[0].size(), 1e-6, 1e-5);
    }
}

// Q8 weights (quantised here as at load): the VNNI kernel (activations rounded to int8 blocks)
// or the widening path, on odd shapes: K an odd number of 32-blocks (96, 864: a zmm pair half
// empty), one block (32), real hidden sizes (576, 896, 1536, 2048); N not a multiple of the
// 3-row block; T from one decode row to two token tiles and a prefill (70). Random x is held to
// the int8-rounding allowance, int8-representable x to the f32 tolerance. Not on cuda: Q8 is a
// cpu option for now (the model refuses it there at load).
void test_matmul_batch_invariant(Device* dev, Checker& ck);

void test_matmul_q8(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  if (std::string(dev->name()) == "cuda") return;
  const bool cpu = std::string(dev->name()) == "cpu";
  for (int64_t K : {576, 896, 1536, 2048, 32, 96, 864})
    for (int64_t T : {1, 2, 3, 8, 9, 17, 70, 130})
      for (XKind kind : {XKind::Random, XKind::Representable}) {
        if (T == 130 && (K > 896 || !cpu)) continue;  // two cpu token passes of the widened path
        const int njobs = rng.range(1, 3);
        std::vector<std::vector<uint8_t>> bytes;
        std::vector<std::vector<float>> deq;
        std::vector<int64_t> Ns;
        for (int j = 0; j < njobs; j++) {
          const int64_t N = rng.pick<int64_t>({1, 5, 64, 131, 192});
          Ns.push_back(N);
          const DType src = rng.pick<DType>({DType::F32, DType::F16, DType::BF16});
          const TestWeight w = make_weight(rng, src, N, K, rng.pick<float>({0.5f, 0.02f}));
          const std::vector<uint8_t> stored = to_dtype(w.f32, src);
          bytes.emplace_back(size_t(weight_bytes(DType::Q8, N, K)));
          quantize_q8_rows(stored.data(), src, N, K, bytes.back().data());
          deq.emplace_back(size_t(N * K));
          for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) deq.back()[size_t(n * K + k)] = load_weight_at(bytes.back().data(), DType::Q8, K, n, k);
        }
        matmul_case(dev, ref, rng, ck, "matmul int8", DType::Q8, T, K, bytes, deq, Ns, kind);
      }
  test_matmul_batch_invariant(dev, ck);
}

// Where the int8 copies live (runtime/huge-page-arena.h): allocations at 64-byte boundaries that
// never overlap (each filled with its own byte, then every byte read back), one past the 64 MB
// chunk in a chunk of its own, a small one after it packed into that chunk's 2 MB-rounded tail.
void test_huge_page_arena(Checker& ck) {
  HugePageArena arena;
  const int64_t sizes[] = {1, 63, 64, 100000, 3 << 20, int64_t(HugePageArena::kChunkBytes) + 5, 4096};
  std::vector<std::pair<uint8_t*, int64_t>> got;
  float misaligned = 0, missing = 0, overwritten = 0;
  for (size_t i = 0; i < std::size(sizes); i++) {
    uint8_t* p = arena.allocate(sizes[i]);
    if (p == nullptr) {
      missing += 1;
      continue;
    }
    if (reinterpret_cast<uintptr_t>(p) % 64 != 0) misaligned += 1;
    std::memset(p, int(i + 1), size_t(sizes[i]));
    got.push_back({p, sizes[i]});
  }
  for (size_t i = 0; i < got.size(); i++)
    for (int64_t b = 0; b < got[i].second; b++)
      if (got[i].first[b] != uint8_t(i + 1)) {
        overwritten += 1;
        break;
      }
  const float zero = 0, chunks = float(arena.reserved_bytes() / int64_t(HugePageArena::kPageBytes));
  const float expect_chunks = float((HugePageArena::kChunkBytes + HugePageArena::kChunkBytes + HugePageArena::kPageBytes) /
                                    HugePageArena::kPageBytes);
  ck.compare("int8 convert", "huge-page arena: allocations that failed", &missing, &zero, 1, 0, 0);
  ck.compare("int8 convert", "huge-page arena: allocations off a 64-byte boundary", &misaligned, &zero, 1, 0, 0);
  ck.compare("int8 convert", "huge-page arena: allocations another one overwrote", &overwritten, &zero, 1, 0, 0);
  ck.compare("int8 convert", "huge-page arena: 2 MB pages reserved (64 MB + the 64 MB + 5 B one)", &chunks,
             &expect_chunks, 1, 0, 0);
}

// A token's outputs are the same bits whatever else is in its step: token 0 of a T-token matmul
// against the same token alone, for f32, f16 and bf16 weights (bf16 below the vdpbf16ps threshold), int8
// below the AMX one (those paths change the arithmetic on purpose: see cpu-device.h and
// matmul-q8-cpu.cc). Batch invariance and lossless speculation (a tree row is a bigger step than
// the decode row it replaces) rest on it. Its own seed; the cpu device only for now: the cuda
// matmul picks GEMV or tensor-core GEMM by the step's size.
void test_matmul_batch_invariant(Device* dev, Checker& ck) {
  if (std::string(dev->name()) != "cpu") return;
  Rng rng{0xba7c4};
  const int64_t N = 131, ldx = 584;
  // K = 579: the scalar K % 8 tail of the AVX2 kernels, where a step of few tokens (f32 up to 8,
  // 16-bit up to 4) reads its rows as single streams (dot_row_streaming) and a larger one in tiles.
  for (int64_t K : {576, 579}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::Q8}) {
      if (dt == DType::Q8 && K % kQ8Block != 0) continue;
      const TestWeight w = make_weight(rng, DType::F32, N, K, 0.05f);
      std::vector<uint8_t> bytes;
      if (dt == DType::Q8) {
        bytes.resize(size_t(weight_bytes(DType::Q8, N, K)));
        quantize_q8_rows(w.f32.data(), DType::F32, N, K, bytes.data());
      } else {
        bytes = to_dtype(w.f32, dt);
      }
      auto wb = put(dev, bytes.data(), bytes.size());
      const auto x = randn(rng, size_t(15 * ldx));
      auto xb = put(dev, x);
      std::vector<float> alone;
      for (int64_t T : {1, 2, 3, 5, 8, 9, 15}) {
        auto yb = put(dev, std::vector<float>(size_t(T * N)));
        const MatmulJob job{{wb.data(), dt, N, K}, nullptr, yb.data(), N};
        dev->matmul(xb.data(), T, ldx, &job, 1, false);
        const auto y = get(dev, yb, size_t(T * N));
        if (T == 1) {
          alone = y;
          continue;
        }
        ck.compare("matmul", std::string("matmul ") + dtype_name(dt) + " K " + std::to_string(K) + ": token 0 of " +
                                 std::to_string(T) + " is its batch-1 bits",
                   y.data(), alone.data(), size_t(N), 0, 0);
      }
    }
  }
}

// The load-time conversion (runtime/quantize-q8.h), device-independent: every weight of random
// f32/f16/bf16 rows within d/2 (plus f32 rounding) of its dequantised value, a known block's
// bytes exactly, an all-zero block, and K not a multiple of 32 refused.
void test_q8_convert(Rng& rng, Checker& ck) {
  for (DType src : {DType::F32, DType::F16, DType::BF16})
    for (float scale : {1.0f, 0.05f, 3e-3f}) {
      const int64_t N = 7, K = 96;
      const TestWeight w = make_weight(rng, src, N, K, scale);
      const std::vector<uint8_t> stored = to_dtype(w.f32, src);
      const std::vector<float> orig = widen(stored, src);
      std::vector<uint8_t> q(size_t(weight_bytes(DType::Q8, N, K)));
      quantize_q8_rows(stored.data(), src, N, K, q.data());
      std::vector<float> deq(orig.size());
      std::vector<double> bound(orig.size());
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
          deq[size_t(n * K + k)] = load_weight_at(q.data(), DType::Q8, K, n, k);
          uint16_t d16;
          std::memcpy(&d16, q.data() + n * q8_row_bytes(K) + K + k / kQ8Block * 2, 2);
          // d/2 for normal f16 scales; 127·2^-25 covers a subnormal scale's rounding.
          bound[size_t(n * K + k)] = f16_to_f32(d16) * (0.5 + 1e-6) + 127.0 * std::ldexp(1.0, -25);
        }
      ck.compare("int8 convert", std::string("quantise->dequantise from ") + dtype_name(src) +
                                     " scale " + std::to_string(scale),
                 deq.data(), orig.data(), deq.size(), 0, 0, bound.data());
    }
  // A known block: q = (i*37 mod 255) - 127 and d = 2^-4 (exact in f16: 0x2c00); w = d*q.
  {
    std::vector<float> wv(kQ8Block * 2, 0.0f);  // block 1 all zero: d = 0, q = 0
    std::vector<float> expect_q(kQ8Block * 2, 0.0f);
    for (int i = 0; i < kQ8Block; i++) {
      const int qv = (i * 37) % 255 - 127;
      wv[size_t(i)] = 0.0625f * float(qv);
      expect_q[size_t(i)] = float(qv);
    }
    wv[5] = 0.0625f * 127.0f;  // the block's max |q| must be 127 for d to come out as 2^-4
    expect_q[5] = 127.0f;
    std::vector<uint8_t> q(size_t(q8_row_bytes(kQ8Block * 2)));
    quantize_q8_rows(wv.data(), DType::F32, 1, kQ8Block * 2, q.data());
    std::vector<float> got_q(kQ8Block * 2), got_d(2), expect_d = {float(0x2c00), 0.0f};
    for (int i = 0; i < kQ8Block * 2; i++) got_q[size_t(i)] = float(static_cast<int8_t>(q[size_t(i)]));
    for (int b = 0; b < 2; b++) {
      uint16_t d16;
      std::memcpy(&d16, q.data() + kQ8Block * 2 + b * 2, 2);
      got_d[size_t(b)] = float(d16);
    }
    ck.compare("int8 convert", "known block int8 values", got_q.data(), expect_q.data(), got_q.size(), 0, 0);
    ck.compare("int8 convert", "known block f16 scales (0x2c00 = 2^-4, then 0)", got_d.data(), expect_d.data(), 2, 0, 0);
  }
  const std::vector<float> odd(5 * 48, 1.0f);
  const WeightView v{odd.data(), DType::F32, 5, 48};
  const float refused = check_q8_quantizable(v, "t").ok() ? 0.0f : 1.0f, one = 1.0f;
  ck.compare("int8 convert", "K = 48 (not a multiple of 32) refused", &refused, &one, 1, 0, 0);
  test_huge_page_arena(ck);
}

// rmsnorm, rope, silu (large |gate| reaches exp's clamps), embedding per dtype (exact), argmax
// (exact: first maximum, NaN never chosen, -1 when nothing beats -inf), top_k and log_sum_exp at
// real hidden sizes, head dims and vocabulary sizes.
void test_elementwise(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (int64_t H : {576, 896, 2048, 4096})
    for (int64_t T : {1, 5, 33}) {
      auto x = randn(rng, size_t(T * H), 3.0f), w = randn(rng, size_t(H));
      std::vector<float> out[2];
      for (int side = 0; side < 2; side++) {
        Device* d = side ? ref : dev;
        auto xb = put(d, x), wb = put(d, w), yb = put(d, std::vector<float>(x.size()));
        d->rmsnorm(xb.data(), T, H, H, wb.data(), 1e-5f, yb.data(), H);
        out[side] = get(d, yb, x.size());
      }
      ck.compare("rmsnorm", dims("rmsnorm", {{"T", T}, {"H", H}}), out[0].data(), out[1].data(), out[0].size(), 1e-6,
                 1e-5);
    }
  for (int D : {64, 128, 80})
    for (int64_t T : {1, 7, 40}) {
      const int heads = rng.pick({2, 9, 14});
      const int64_t ld = int64_t(heads) * D + 16;
      auto x = randn(rng, size_t(T * ld), 2.0f);
      std::vector<float> c(size_t(T * D / 2)), s(c.size());
      for (size_t i = 0; i < c.size(); i++) {
        const double ang = rng.uniform(0, 1000);
        c[i] = float(std::cos(ang));
        s[i] = float(std::sin(ang));
      }
      std::vector<float> out[2];
      for (int side = 0; side < 2; side++) {
        Device* d = side ? ref : dev;
        auto xb = put(d, x), cb = put(d, c), sb = put(d, s);
        d->rope(xb.data(), T, ld, heads, D, cb.data(), sb.data());
        out[side] = get(d, xb, x.size());
      }
      ck.compare("rope", dims("rope", {{"T", T}, {"heads", heads}, {"D", D}}), out[0].data(), out[1].data(),
                 out[0].size(), 1e-6, 1e-5);
    }
  for (int64_t n : {1, 100, 1536, 50000}) {
    auto g = randn(rng, size_t(n), 20.0f), u = randn(rng, size_t(n), 2.0f);
    std::vector<float> mul[2], res[2];
    for (int side = 0; side < 2; side++) {
      Device* d = side ? ref : dev;
      auto gb = put(d, g), ub = put(d, u), yb = put(d, std::vector<float>(g.size()));
      d->silu_mul(gb.data(), ub.data(), n, yb.data());
      mul[side] = get(d, yb, g.size());
      d->silu_residual(gb.data(), n, ub.data());  // y = u + silu(g)
      res[side] = get(d, ub, g.size());
    }
    ck.compare("silu", dims("silu_mul", {{"n", n}}), mul[0].data(), mul[1].data(), mul[0].size(), 1e-6, 1e-5);
    ck.compare("silu", dims("silu_residual", {{"n", n}}), res[0].data(), res[1].data(), res[0].size(), 1e-6, 1e-5);
  }
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const int64_t V = 301, H = 576, T = 9;
    TestWeight table = make_weight(rng, dt, V, H);
    std::vector<int32_t> ids(T);
    for (auto& id : ids) id = rng.range(0, int(V) - 1);
    std::vector<float> out[2];
    for (int side = 0; side < 2; side++) {
      Device* d = side ? ref : dev;
      auto tb = put_weight(d, table, dt);
      auto ib = put(d, ids);
      auto yb = put(d, std::vector<float>(size_t(T * H)));
      d->embedding(ib.data(), T, {tb.data(), dt, V, H}, yb.data());
      out[side] = get(d, yb, size_t(T * H));
    }
    ck.compare("embedding", dims((std::string("embedding ") + dtype_name(dt)).c_str(), {{"T", T}, {"H", H}}),
               out[0].data(), out[1].data(), out[0].size(), 0, 0);
  }
  {
    const int64_t T = 6, V = 49152;
    auto x = randn(rng, size_t(T * V));
    // Row 1: the maximum twice (the first wins); row 2: NaNs inside; row 3: NaN first (never
    // chosen: the first maximum of the rest); row 4: all -inf (-1); row 5: -inf and NaN only (-1).
    x[size_t(V + 700)] = x[size_t(V + 40000)] = 50.0f;
    for (int64_t i = 3; i < V; i += 97) x[size_t(2 * V + i)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(3 * V)] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 0; i < V; i++) x[size_t(4 * V + i)] = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < V; i++)
      x[size_t(5 * V + i)] = i % 3 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    std::vector<int32_t> out[2];
    for (int side = 0; side < 2; side++) {
      Device* d = side ? ref : dev;
      auto xb = put(d, x);
      auto ob = put(d, std::vector<int32_t>(size_t(T), -7));
      d->argmax(xb.data(), T, V, V, ob.data());
      out[side] = get(d, ob, size_t(T));
    }
    compare_exact(ck, "argmax", dims("argmax", {{"T", T}, {"V", V}}), out[0], out[1]);
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
    // ids: columns standing for token ids (a draft vocabulary: ascending, with gaps).
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; i++) ids[size_t(i)] = int32_t(3 * i + i % 2);
    for (const int k : {K, 1}) {  // K = 1 takes its own vector path
      for (const bool mapped : {false, true}) {
        std::vector<int32_t> out[2];
        for (int side = 0; side < 2; side++) {
          Device* d = side ? ref : dev;
          auto xb = put(d, x);
          auto ib = put(d, ids);
          auto ob = put(d, std::vector<int32_t>(size_t(T * k)));
          d->top_k(xb.data(), T, V, V, k, mapped ? ib.data() : nullptr, ob.data());
          out[side] = get(d, ob, size_t(T * k));
        }
        compare_exact(ck, mapped ? "top_k ids" : "top_k", dims("top_k", {{"T", T}, {"V", V}, {"K", k}}), out[0],
                      out[1]);
      }
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
    std::vector<double> out[2];
    for (int side = 0; side < 2; side++) {
      Device* d = side ? ref : dev;
      auto xb = put(d, x);
      auto ob = put(d, std::vector<double>(size_t(T)));
      d->log_sum_exp(xb.data(), T, V, V, ob.data());
      out[side] = get(d, ob, size_t(T));
    }
    const std::vector<double>&a = out[0], &b = out[1];
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
// with block sizes that divide the context and ones that do not, in f32 caches and, when the
// device keeps another KV dtype, in that one (the caches rounded to it; see test_kv_dtypes).
// Then long histories (600-2000 entries) under a few short rows: where the cuda device splits a
// row's keys across blocks and merges the splits. Then prompts (40-100 tokens, with and without
// history, beside decode rows) in f16 and bf16 caches: the cuda device's tensor-core kernel, its
// partial query and key tiles, and the SIMT kernel for the head dim it is not built for (80).
void test_attention_tree_is_plain(Device* dev, Checker& ck);

void test_attention(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  struct Heads {
    int hq, hkv, d;
  };
  enum class Rows { kMixed, kLongHistory, kPrompts };
  struct Grid {
    Rows rows;
    std::vector<int> block_sizes, row_counts;
    std::vector<Heads> heads;
  };
  std::vector<DType> kv_dtypes = {DType::F32};
  if (dev->kv_dtype() != DType::F32) kv_dtypes.push_back(dev->kv_dtype());
  const std::vector<Heads> all_heads = {Heads{9, 3, 64}, Heads{14, 2, 64}, Heads{32, 8, 128}, Heads{4, 4, 80}};
  for (const Grid& grid : {Grid{Rows::kMixed, {16, 5}, {1, 3, 8}, all_heads},
                           Grid{Rows::kLongHistory, {16}, {1, 3}, all_heads},
                           Grid{Rows::kPrompts, {16}, {1, 2}, {Heads{9, 3, 64}, Heads{32, 8, 128}, Heads{4, 4, 80}}}})
  for (DType kv : grid.rows == Rows::kPrompts ? std::vector<DType>{DType::F16, DType::BF16} : kv_dtypes)
    for (Heads hs : grid.heads)
      for (int bs : grid.block_sizes)
        for (int nrows : grid.row_counts) {
          const int64_t E = int64_t(hs.hkv) * hs.d;
          const int blocks = 400;  // enough for 3 long rows of block size 16
          std::vector<int32_t> perm(blocks);
          for (int i = 0; i < blocks; i++) perm[size_t(i)] = i;
          for (int i = blocks - 1; i > 0; i--) std::swap(perm[size_t(i)], perm[size_t(rng.range(0, i))]);
          const auto kc = to_dtype(randn(rng, size_t(blocks) * bs * E), kv);
          const auto vc = to_dtype(randn(rng, size_t(blocks) * bs * E), kv);
          std::vector<AttnRow> rows;  // block_table, tree_mask: offsets into perm and masks until placed
          std::vector<uint8_t> masks;
          std::vector<int64_t> mask_at;
          int next_block = 0, T = 0;
          const bool long_history = grid.rows == Rows::kLongHistory;
          for (int r = 0; r < nrows; r++) {
            // decode row, prefill chunk (maybe with history), or a Medusa-style tree; the prompt
            // grid's first row is a prompt (causal), its others decode rows
            const bool prompt = grid.rows == Rows::kPrompts && r == 0;
            const int kind = prompt ? 1 : grid.rows == Rows::kPrompts ? 0 : rng.range(0, 2);
            const int n = prompt ? rng.range(40, 100) : kind == 0 ? 1 : rng.range(2, long_history ? 5 : 24);
            const int cache_len = long_history ? rng.range(600, 2000) : rng.range(0, 1) ? rng.range(0, 150) : 0;
            const int need = (cache_len + n + bs - 1) / bs;
            rows.push_back({T, n, cache_len, nullptr, nullptr});
            mask_at.push_back(kind == 2 ? int64_t(masks.size()) : -1);
            if (kind == 2)
              for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) masks.push_back(j == i || (j < i && rng.range(0, 2) == 0));
            rows.back().block_table = perm.data() + next_block;  // host, replaced per device below
            next_block += need;
            T += n;
          }
          const int64_t ldq = int64_t(hs.hq) * hs.d + int64_t(2 * E);
          auto q = randn(rng, size_t(T * ldq), 2.0f);
          const size_t out_n = size_t(T) * hs.hq * hs.d;
          std::vector<float> out[2];
          for (int side = 0; side < 2; side++) {
            Device* d = side ? ref : dev;
            auto qb = put(d, q), ob = put(d, std::vector<float>(out_n));
            auto kb = put(d, kc), vb = put(d, vc);
            auto pb = put(d, perm);
            auto mb = put(d, masks);
            std::vector<AttnRow> placed = rows;
            for (size_t r = 0; r < placed.size(); r++) {
              placed[r].block_table = pb.data() + (rows[r].block_table - perm.data());
              placed[r].tree_mask = mask_at[r] < 0 ? nullptr : mb.data() + mask_at[r];
            }
            const AttnShape shape{hs.hq, hs.hkv, hs.d, bs, float(1.0 / std::sqrt(double(hs.d))), kv};
            d->attention(qb.data(), ldq, kb.data(), vb.data(), placed.data(), nrows, shape, ob.data());
            out[side] = get(d, ob, out_n);
          }
          ck.compare("attention",
                     dims((std::string(long_history ? "attention, long history, kv "
                                       : grid.rows == Rows::kPrompts ? "attention, prompts, kv "
                                                                     : "attention kv ") +
                           dtype_name(kv)).c_str(),
                          {{"rows", nrows}, {"T", T}, {"Hq", hs.hq}, {"Hkv", hs.hkv}, {"D", hs.d}, {"bs", bs}}),
                     out[0].data(), out[1].data(), out_n, 1e-5, 1e-4);
        }
  test_attention_tree_is_plain(dev, ck);
}

// Speculation is lossless only if a token's attention is the same bits as a plain decode row
// and as a node of a verification tree: node i of a chain tree at cache_len L against a decode
// row at cache_len L + i, over the same cache, at lengths that cross the cpu kernel's key-piece
// boundaries (every 256 positions; a node just before one sees a masked-only piece after it).
// Its own seed, so the rest of its family's seeded cases are the same on every device. The cpu
// kernel only, for now: the cuda kernels (decode rows split over KV blocks, tree rows
// flash-style) sum in different orders, 4-5e-8 apart at cache_len 509 and 1020 on the SIMT
// emulator.
void test_attention_tree_is_plain(Device* dev, Checker& ck) {
  if (std::string(dev->name()) != "cpu") return;
  Rng rng{0x5eed};
  const int hq = 9, hkv = 3, D = 64, bs = 16, n = 5;
  const int64_t E = int64_t(hkv) * D, ldq = int64_t(hq) * D + 2 * E;
  for (int L : {100, 252, 254, 509, 1020, 1500}) {
    const int blocks = (L + n + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; b++) table[size_t(b)] = blocks - 1 - b;  // not in order
    const auto kc = randn(rng, size_t(blocks) * bs * E), vc = randn(rng, size_t(blocks) * bs * E);
    const auto q = randn(rng, size_t(n * ldq), 2.0f);
    std::vector<uint8_t> mask(size_t(n * n));
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) mask[size_t(i * n + j)] = j <= i;
    auto kb = put(dev, kc), vb = put(dev, vc), qb = put(dev, q);
    auto tb = put(dev, table);
    auto mb = put(dev, mask);
    const AttnShape shape{hq, hkv, D, bs, float(1.0 / std::sqrt(double(D))), DType::F32};
    auto tree_out = put(dev, std::vector<float>(size_t(n) * hq * D));
    const AttnRow tree{0, n, L, tb.data(), mb.data()};
    dev->attention(qb.data(), ldq, kb.data(), vb.data(), &tree, 1, shape, tree_out.data());
    const auto tree_host = get(dev, tree_out, size_t(n) * hq * D);
    for (int i = 0; i < n; i++) {
      auto plain_out = put(dev, std::vector<float>(size_t(hq) * D));
      const AttnRow plain{0, 1, L + i, tb.data(), nullptr};
      dev->attention(qb.data() + i * ldq, ldq, kb.data(), vb.data(), &plain, 1, shape, plain_out.data());
      const auto plain_host = get(dev, plain_out, size_t(hq) * D);
      ck.compare("attention", "tree node " + std::to_string(i) + " at cache_len " + std::to_string(L) +
                                  " is the decode row's bits",
                 tree_host.data() + size_t(i) * hq * D, plain_host.data(), plain_host.size(), 0, 0);
    }
  }
  // A branching tree (parents -1 0 0 1 2 3): a node's ancestors are not the slots just before it.
  // Accepting its branch compacts their K/V into consecutive slots (the engine's kv copies); the
  // decode row of the node's token over that cache must give the node's bits.
  const int parent[6] = {-1, 0, 0, 1, 2, 3};
  const int nt = 6;
  for (int L : {37, 253, 510}) {
    const int blocks = (L + nt + bs - 1) / bs;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; b++) table[size_t(b)] = blocks - 1 - b;
    const auto kc = randn(rng, size_t(blocks) * bs * E), vc = randn(rng, size_t(blocks) * bs * E);
    const auto q = randn(rng, size_t(nt * ldq), 2.0f);
    std::vector<uint8_t> mask(size_t(nt * nt), 0);
    for (int i = 0; i < nt; i++)
      for (int a = i; a >= 0; a = parent[a]) mask[size_t(i * nt + a)] = 1;
    auto slot = [&](int c) { return size_t(table[size_t(c / bs)]) * bs + size_t(c % bs); };
    auto qb = put(dev, q);
    auto tb = put(dev, table);
    auto mb = put(dev, mask);
    const AttnShape shape{hq, hkv, D, bs, float(1.0 / std::sqrt(double(D))), DType::F32};
    auto kb = put(dev, kc), vb = put(dev, vc);
    auto tree_out = put(dev, std::vector<float>(size_t(nt) * hq * D));
    const AttnRow tree{0, nt, L, tb.data(), mb.data()};
    dev->attention(qb.data(), ldq, kb.data(), vb.data(), &tree, 1, shape, tree_out.data());
    const auto tree_host = get(dev, tree_out, size_t(nt) * hq * D);
    for (int i : {4, 5}) {
      std::vector<int> branch;  // root first
      for (int a = i; a >= 0; a = parent[a]) branch.insert(branch.begin(), a);
      auto kc2 = kc, vc2 = vc;
      for (size_t d = 0; d < branch.size(); d++) {
        std::copy_n(kc.begin() + int64_t(slot(L + branch[d]) * E), E, kc2.begin() + int64_t(slot(L + int(d)) * E));
        std::copy_n(vc.begin() + int64_t(slot(L + branch[d]) * E), E, vc2.begin() + int64_t(slot(L + int(d)) * E));
      }
      auto kb2 = put(dev, kc2), vb2 = put(dev, vc2);
      auto plain_out = put(dev, std::vector<float>(size_t(hq) * D));
      const AttnRow plain{0, 1, L + int(branch.size()) - 1, tb.data(), nullptr};
      dev->attention(qb.data() + i * ldq, ldq, kb2.data(), vb2.data(), &plain, 1, shape, plain_out.data());
      const auto plain_host = get(dev, plain_out, size_t(hq) * D);
      ck.compare("attention", "branching tree node " + std::to_string(i) + " at cache_len " + std::to_string(L) +
                                  " is its compacted decode row's bits",
                 tree_host.data() + size_t(i) * hq * D, plain_host.data(), plain_host.size(), 0, 0);
    }
  }
}

// The adapters of one LoRA case on both sides: each pool weight (A [r, K] or Bt [r, N]) is
// uploaded once per device, and segments of one adapter point at the same bytes (as in a slot,
// which the cpu kernels' prefetch decisions key on).
struct LoraCase {
  DType dt;
  std::vector<const TestWeight*> pool;  // not owned
  std::vector<LoraSegment> sh, ex;      // w set by place()
  std::vector<size_t> a_of, b_of;       // pool index of each segment's A and Bt
  size_t intern(const TestWeight* w) {
    for (size_t i = 0; i < pool.size(); i++)
      if (pool[i] == w) return i;
    pool.push_back(w);
    return pool.size() - 1;
  }
  void add(int tok_start, int n, int r, int col, float scale, const TestWeight* a, const TestWeight* b) {
    sh.push_back({tok_start, n, nullptr, dt, r, col, 1.0f});
    ex.push_back({tok_start, n, nullptr, dt, r, col, scale});
    a_of.push_back(intern(a));
    b_of.push_back(intern(b));
  }
  void place(Device* d, std::vector<DeviceBuffer<uint8_t>>* bufs, std::vector<LoraSegment>* sh_out,
             std::vector<LoraSegment>* ex_out) const {
    bufs->clear();
    for (const TestWeight* w : pool) bufs->push_back(put_weight(d, *w, dt));
    *sh_out = sh;
    *ex_out = ex;
    for (size_t i = 0; i < sh.size(); i++) {
      (*sh_out)[i].w = (*bufs)[a_of[i]].data();
      (*ex_out)[i].w = (*bufs)[b_of[i]].data();
    }
  }
};

// SGMV/BGMV shrink and expand over the adapter mixes of STYLE.md item 10, with adapters stored
// in f32 and in bf16/f16 (16-bit models keep their adapters in the model's dtype). Batches >= 8
// with distinct adapters take the expand's split-by-segment path, smaller ones the
// split-by-feature path; ranks 1..128 mix within a batch (rank tails of the 4-row expand groups);
// some rows are prefill segments. Both expands read the reference's shrink, so each half is
// checked alone.
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
          LoraCase lc{dt, {}, {}, {}, {}, {}};
          int T = 0;
          for (int row = 0; row < batch; row++) {
            const int n = rng.range(0, 3) == 0 ? rng.range(2, 40) : 1;
            int a;
            if (mix == 3)  // skewed: most rows on adapter 0
              a = rng.range(0, 3) ? 0 : rng.range(0, nadapters - 1);
            else
              a = mix == 0 ? row % nadapters : rng.range(0, nadapters - 1);
            const bool none = mix == 4 && rng.range(0, 2) == 0;
            if (!none) lc.add(T, n, ranks[size_t(a)], 0, rng.uniform(0.1f, 4.0f), &A[size_t(a)], &B[size_t(a)]);
            T += n;
          }
          const int64_t ldx = K + 3, ldt = 3 * 128, ldy = N + 1;
          auto x = randn(rng, size_t(T * ldx));
          auto y0 = randn(rng, size_t(T * ldy));
          std::vector<float> tmp[2], y[2];
          std::vector<DeviceBuffer<uint8_t>> bufs[2];
          std::vector<LoraSegment> sh[2], ex[2];
          for (int side = 0; side < 2; side++) {
            Device* d = side ? ref : dev;
            lc.place(d, &bufs[side], &sh[side], &ex[side]);
            auto xb = put(d, x), tb = put(d, std::vector<float>(size_t(T * ldt), 0.0f));
            d->lora_shrink(xb.data(), ldx, K, sh[side].data(), int(sh[side].size()), tb.data(), ldt);
            tmp[side] = get(d, tb, size_t(T * ldt));
          }
          for (int side = 0; side < 2; side++) {
            Device* d = side ? ref : dev;
            auto tb = put(d, tmp[1]), yb = put(d, y0);
            d->lora_expand(tb.data(), ldt, N, ex[side].data(), int(ex[side].size()), yb.data(), ldy);
            y[side] = get(d, yb, y0.size());
          }
          const std::string what = std::string(mixes[mix]) + " " + dtype_name(dt);
          ck.compare("lora_shrink",
                     dims(("lora_shrink " + what).c_str(), {{"batch", batch}, {"T", T}, {"rank", rank}, {"K", K}}),
                     tmp[0].data(), tmp[1].data(), tmp[0].size(), 1e-5 * std::sqrt(double(K)), 1e-4);
          ck.compare("lora_expand",
                     dims(("lora_expand " + what).c_str(), {{"batch", batch}, {"T", T}, {"rank", rank}, {"N", N}}),
                     y[0].data(), y[1].data(), y[0].size(), 1e-5 * std::sqrt(double(rank)), 1e-4);
        }
  // Several modules shrunk into side-by-side columns in one call (q|k|v), mixed with no-adapter rows.
  {
    const int64_t K = 576, ldt = 3 * 128;
    std::vector<TestWeight> A;
    A.reserve(36);
    LoraCase lc{DType::F32, {}, {}, {}, {}, {}};
    int T = 0;
    for (int row = 0; row < 12; row++) {
      const int n = row % 4 == 0 ? 17 : 1;
      if (row % 3 != 2) {
        int col = 0;
        for (int m = 0; m < 3; m++) {
          const int r = rng.range(1, 128);
          A.push_back(make_weight(rng, DType::F32, r, K, 0.1f));
          lc.add(T, n, r, col, 1.0f, &A.back(), &A.back());
          col += r;
        }
      }
      T += n;
    }
    auto x = randn(rng, size_t(T * K));
    std::vector<float> tmp[2];
    for (int side = 0; side < 2; side++) {
      Device* d = side ? ref : dev;
      std::vector<DeviceBuffer<uint8_t>> bufs;
      std::vector<LoraSegment> sh, ex;
      lc.place(d, &bufs, &sh, &ex);
      auto xb = put(d, x), tb = put(d, std::vector<float>(size_t(T * ldt), 0.0f));
      d->lora_shrink(xb.data(), K, K, sh.data(), int(sh.size()), tb.data(), ldt);
      tmp[side] = get(d, tb, size_t(T * ldt));
    }
    ck.compare("lora_shrink", dims("lora_shrink qkv-columns", {{"T", T}, {"K", K}}), tmp[0].data(), tmp[1].data(),
               tmp[0].size(), 1e-5 * std::sqrt(double(K)), 1e-4);
  }
}

// lora_apply: per adapter run, the shrink of a group's modules (q|k|v-like: 1-3 modules side by
// side in the scratch, each with its own output width) and their expands; few runs take the
// two-op path, many runs the one-region path (one-token runs: the decode-row shrink, 8 rows of A
// at a time, so ranks 7, 12, 33 leave tails); rows without adapter, prefill runs, mixed ranks, a
// K with a vector tail (100 % 16 = 4).
// A token's LoRA output is the same bits however its step groups the work: token 0 of one
// adapter's run applied alone, in a run of 5 tokens beside a second adapter's run (the cpu device
// then shrinks it in a multi-token tile, not one token at a time), and in a 70-token run (the
// two-op path, whose expand splits the output columns). K 200 and N 150 have tails past the
// vector width. Own seed; the cpu device only (the cuda kernels are not held to it yet), both ISAs
// (the AVX2 one-token shrink summed in another order until 2026-11-27).
void test_lora_batch_invariant(Device* dev, Checker& ck) {
  if (std::string(dev->name()) != "cpu") return;
  Rng rng{0x10ba};
  const int64_t K = 200, N = 150, R = 16, T = 72, ldx = K + 3, ldt = 2 * R;
  for (DType dt : {DType::F32, DType::BF16}) {
    const TestWeight a0 = make_weight(rng, dt, R, K), b0 = make_weight(rng, dt, R, N);
    const TestWeight a1 = make_weight(rng, dt, R, K), b1 = make_weight(rng, dt, R, N);
    auto bytes = [&](const TestWeight& w) { return to_dtype(w.f32, dt); };
    const auto A0 = bytes(a0), B0 = bytes(b0), A1 = bytes(a1), B1 = bytes(b1);
    auto dA0 = put(dev, A0.data(), A0.size()), dB0 = put(dev, B0.data(), B0.size());
    auto dA1 = put(dev, A1.data(), A1.size()), dB1 = put(dev, B1.data(), B1.size());
    const auto x = randn(rng, size_t(T * ldx));
    const auto y0 = randn(rng, size_t(T * N));
    auto xb = put(dev, x);
    std::vector<float> alone;
    // (tokens of adapter 0's run from token 0, tokens of adapter 1's run after it)
    for (std::pair<int, int> split : {std::pair<int, int>{1, 0}, {5, 1}, {3, 4}, {70, 2}}) {
      std::vector<LoraSegment> sh, ex;
      auto add = [&](int start, int count, const DeviceBuffer<uint8_t>& A, const DeviceBuffer<uint8_t>& B) {
        if (count == 0) return;
        sh.push_back({start, count, A.data(), dt, int32_t(R), 0, 1.0f});
        ex.push_back({start, count, B.data(), dt, int32_t(R), 0, 0.5f});
      };
      add(0, split.first, dA0, dB0);
      add(split.first, split.second, dA1, dB1);
      const int modules[2] = {0, 0};
      auto yb = put(dev, y0);
      auto tb = put(dev, std::vector<float>(size_t(T * ldt)));
      const LoraOutput out{yb.data(), N, N};
      dev->lora_apply(xb.data(), ldx, K, sh.data(), ex.data(), modules, int(sh.size()), &out, tb.data(), ldt);
      const auto y = get(dev, yb, size_t(T * N));
      if (alone.empty()) {
        alone.assign(y.begin(), y.begin() + N);
        continue;
      }
      ck.compare("lora", std::string("lora ") + dtype_name(dt) + " token 0 in runs of " + std::to_string(split.first) +
                             " + " + std::to_string(split.second) + " is its one-token bits",
                 y.data(), alone.data(), size_t(N), 0, 0);
    }
  }
}

void test_lora_apply(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int batch : {2, 9, 33}) {
      const int64_t K = rng.pick<int64_t>({576, 896, 100}), ldt = 3 * 128;
      const int nmod = rng.range(1, 3);
      const int64_t Ns[3] = {576, 192, 1536};
      std::vector<TestWeight> W;
      W.reserve(size_t(batch * 6));
      LoraCase lc{dt, {}, {}, {}, {}, {}};
      std::vector<int> mod;
      int T = 0;
      for (int row = 0; row < batch; row++) {
        const int n = rng.range(0, 4) == 0 ? rng.range(2, 30) : 1;
        if (rng.range(0, 4) != 0) {  // this row has an adapter
          int col = 0;
          for (int m = 0; m < nmod; m++) {
            const int r = rng.pick({1, 4, 7, 12, 16, 33, 64});
            W.push_back(make_weight(rng, dt, r, K, 0.1f));
            const TestWeight* a = &W.back();
            W.push_back(make_weight(rng, dt, r, Ns[m], 0.1f));
            lc.add(T, n, r, col, rng.uniform(0.1f, 4.0f), a, &W.back());
            mod.push_back(m);
            col += r;
          }
        }
        T += n;
      }
      auto x = randn(rng, size_t(T * K));
      std::vector<std::vector<float>> y0;
      for (int m = 0; m < nmod; m++) y0.push_back(randn(rng, size_t(T * (Ns[m] + 2))));
      std::vector<std::vector<float>> y[2];
      std::vector<float> tmp_out[2];
      for (int side = 0; side < 2; side++) {
        Device* d = side ? ref : dev;
        std::vector<DeviceBuffer<uint8_t>> bufs;
        std::vector<LoraSegment> sh, ex;
        lc.place(d, &bufs, &sh, &ex);
        std::vector<DeviceBuffer<float>> yb;
        LoraOutput outs[3];
        for (int m = 0; m < nmod; m++) {
          yb.push_back(put(d, y0[size_t(m)]));
          outs[m] = {yb.back().data(), Ns[m] + 2, Ns[m]};
        }
        auto xb = put(d, x), tb = put(d, std::vector<float>(size_t(T * ldt)));
        d->lora_apply(xb.data(), K, K, sh.data(), ex.data(), mod.data(), int(sh.size()), outs, tb.data(), ldt);
        for (int m = 0; m < nmod; m++) y[side].push_back(get(d, yb[size_t(m)], y0[size_t(m)].size()));
        tmp_out[side] = get(d, tb, size_t(T * ldt));
      }
      // tmp holds the shrink's sums afterwards (the semantics), also where a device splits K.
      ck.compare("lora_apply",
                 dims((std::string("lora_apply tmp ") + dtype_name(dt)).c_str(), {{"batch", batch}, {"T", T}, {"K", K}}),
                 tmp_out[0].data(), tmp_out[1].data(), tmp_out[0].size(), 1e-5 * std::sqrt(double(K)), 1e-4);
      for (int m = 0; m < nmod; m++)
        ck.compare("lora_apply",
                   dims((std::string("lora_apply ") + dtype_name(dt)).c_str(),
                        {{"batch", batch}, {"T", T}, {"modules", nmod}, {"module", m}, {"N", Ns[m]}, {"K", K}}),
                   y[0][size_t(m)].data(), y[1][size_t(m)].data(), y[0][size_t(m)].size(), 1e-5 * std::sqrt(double(K)),
                   1e-4);
    }
  test_lora_batch_invariant(dev, ck);
}

// kv_store then kv_copy (with overlapping from/to slots, where order matters) in f32 and in the
// device's KV dtype, over caches with random contents: exact.
void test_cache(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  const int64_t E = 192, S = 64, T = 9, ldk = 3 * E;
  std::vector<DType> kv_dtypes = {DType::F32};
  if (dev->kv_dtype() != DType::F32) kv_dtypes.push_back(dev->kv_dtype());
  for (DType kv : kv_dtypes) {
    auto k = randn(rng, size_t(T * ldk));
    std::vector<int32_t> slot(T), from(6), to(6);
    for (int64_t t = 0; t < T; t++) slot[size_t(t)] = int32_t((t * 7) % S);
    for (int i = 0; i < 6; i++) {
      from[size_t(i)] = rng.range(0, int(S) - 1);
      to[size_t(i)] = rng.range(0, int(S) - 1);
    }
    const auto kc0 = to_dtype(randn(rng, size_t(S * E)), kv), vc0 = to_dtype(randn(rng, size_t(S * E)), kv);
    std::vector<float> kc[2], vc[2];
    for (int side = 0; side < 2; side++) {
      Device* d = side ? ref : dev;
      auto kb = put(d, k);
      auto kcb = put(d, kc0), vcb = put(d, vc0);
      auto sb = put(d, slot), fb = put(d, from), tb = put(d, to);
      d->kv_store(kb.data(), kb.data() + E, T, ldk, sb.data(), E, kv, kcb.data(), vcb.data());
      d->kv_copy(fb.data(), tb.data(), 6, E, kv, kcb.data(), vcb.data());
      kc[side] = widen(get(d, kcb, kc0.size()), kv);
      vc[side] = widen(get(d, vcb, vc0.size()), kv);
    }
    const std::string what = std::string("kv_store+kv_copy ") + dtype_name(kv);
    ck.compare("kv_cache", what + " K", kc[0].data(), kc[1].data(), kc[0].size(), 0, 0);
    ck.compare("kv_cache", what + " V", vc[0].data(), vc[1].data(), vc[0].size(), 0, 0);
  }
}

// rope_kv_store at Llama-3 (32/8 heads of 128), Qwen2-0.5B (14/2 of 64) and GQA-less shapes,
// in f32 and the device's KV dtype. Its semantics are rope then kv_store, so a device's fused
// call must give the bits of its own two calls (exact: one rotation, one rounding to the cache);
// the reference's result is within rope's bounds.
void test_rope_kv_store(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  std::vector<DType> kv_dtypes = {DType::F32};
  if (dev->kv_dtype() != DType::F32) kv_dtypes.push_back(dev->kv_dtype());
  struct Shape { int qh, kvh, D; int64_t T; };
  for (const Shape& sh : {Shape{32, 8, 128, 1}, Shape{14, 2, 64, 7}, Shape{4, 4, 64, 33}})
    for (DType kv : kv_dtypes) {
      const int64_t E = int64_t(sh.kvh) * sh.D, ldx = int64_t(sh.qh) * sh.D + 2 * E + 8, S = sh.T + 11;
      const int64_t half = sh.D / 2;
      auto x = randn(rng, size_t(sh.T * ldx), 2.0f);
      std::vector<float> c(size_t(sh.T * half)), sn(c.size());
      for (size_t i = 0; i < c.size(); i++) {
        const double ang = rng.uniform(0, 1000);
        c[i] = float(std::cos(ang));
        sn[i] = float(std::sin(ang));
      }
      std::vector<int32_t> slot(size_t(sh.T));
      for (int64_t t = 0; t < sh.T; t++) slot[size_t(t)] = int32_t((t * 5 + 3) % S);
      const auto cache0 = to_dtype(randn(rng, size_t(S * E)), kv);
      // [fused on dev, two calls on dev, fused on ref]: qkv after, K cache, V cache
      std::vector<float> qkv[3], kc[3], vc[3];
      for (int run = 0; run < 3; run++) {
        Device* d = run == 2 ? ref : dev;
        auto xb = put(d, x), cb = put(d, c), sb = put(d, sn);
        auto slb = put(d, slot);
        auto kcb = put(d, cache0), vcb = put(d, cache0);
        if (run == 1) {
          d->rope(xb.data(), sh.T, ldx, sh.qh + sh.kvh, sh.D, cb.data(), sb.data());
          const int64_t k_at = int64_t(sh.qh) * sh.D;
          d->kv_store(xb.data() + k_at, xb.data() + k_at + E, sh.T, ldx, slb.data(), E, kv, kcb.data(), vcb.data());
        } else {
          d->rope_kv_store(xb.data(), sh.T, ldx, sh.qh, sh.kvh, sh.D, cb.data(), sb.data(), slb.data(), kv, kcb.data(),
                           vcb.data());
        }
        qkv[run] = get(d, xb, x.size());
        kc[run] = widen(get(d, kcb, cache0.size()), kv);
        vc[run] = widen(get(d, vcb, cache0.size()), kv);
      }
      const std::string what = dims("rope_kv_store", {{"Hq", sh.qh}, {"Hkv", sh.kvh}, {"D", sh.D}, {"T", sh.T}}) + " " +
                               dtype_name(kv);
      ck.compare("kv_cache", what + " qkv = rope's", qkv[0].data(), qkv[1].data(), qkv[0].size(), 0, 0);
      ck.compare("kv_cache", what + " K = kv_store's", kc[0].data(), kc[1].data(), kc[0].size(), 0, 0);
      ck.compare("kv_cache", what + " V = kv_store's", vc[0].data(), vc[1].data(), vc[0].size(), 0, 0);
      // Against the reference: rope's bounds for q and k; the cache one rounding of those apart.
      const double cache_rel = kv == DType::F32 ? 1e-5 : kv == DType::F16 ? 2e-3 : 1.6e-2;
      ck.compare("kv_cache", what + " qkv vs reference", qkv[0].data(), qkv[2].data(), qkv[0].size(), 1e-6, 1e-5);
      ck.compare("kv_cache", what + " K vs reference", kc[0].data(), kc[2].data(), kc[0].size(), 1e-6, cache_rel);
      ck.compare("kv_cache", what + " V vs reference", vc[0].data(), vc[2].data(), vc[0].size(), 0, 0);
    }
}

// RoPE inverse frequencies of a real config: theta^(-2i/D), optionally divided by a linear factor.
std::vector<double> inv_freqs(int D, double theta, double factor) {
  std::vector<double> f(size_t(D / 2));
  for (int i = 0; i < D / 2; i++) f[size_t(i)] = 1.0 / std::pow(theta, double(2 * i) / double(D)) / factor;
  return f;
}

// The per-step ops the model once ran on the host, in device memory: rope_tables (positions up to
// 10^6, thetas of SmolLM2/Llama-3, linear scaling), gather_rows (logits rows; Medusa rows
// replicated per head, so indices repeat), kv_slots over shuffled block tables (decode rows,
// prefill chunks with history, block sizes 16, 32 and 5) and paged_slots (kv-copy lists).
void test_step_ops(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (int D : {64, 128, 80})
    for (int64_t T : {1, 9, 133}) {
      const double theta = rng.pick({10000.0, 500000.0}), factor = rng.pick({1.0, 8.0});
      const std::vector<double> f = inv_freqs(D, theta, factor);
      std::vector<int32_t> pos(static_cast<size_t>(T));
      for (auto& p : pos) p = rng.range(0, 3) == 0 ? rng.range(0, 1000000) : rng.range(0, 4096);
      const int64_t half = D / 2;
      const std::vector<float> none(size_t(T * half));
      std::vector<float> tab[2][2];  // [device, reference][cos, sin]
      Device* devs[2] = {dev, ref};
      for (int d = 0; d < 2; d++) {
        auto p = put(devs[d], pos);
        auto fr = put(devs[d], f);
        auto c = put(devs[d], none), s = put(devs[d], none);
        devs[d]->rope_tables(p.data(), T, fr.data(), half, c.data(), s.data());
        tab[d][0] = get(devs[d], c, none.size());
        tab[d][1] = get(devs[d], s, none.size());
      }
      for (int k = 0; k < 2; k++)
        ck.compare("rope_tables", dims(k ? "rope_tables sin" : "rope_tables cos", {{"T", T}, {"D", D}, {"theta", int64_t(theta)}}),
                   tab[0][k].data(), tab[1][k].data(), none.size(), 1e-6, 0);
    }
  for (int64_t H : {576, 2048})
    for (int64_t n : {1, 4, 33}) {
      const int64_t rows = 70, ld = H + 7;
      const auto src = randn(rng, size_t(rows * ld));
      std::vector<int32_t> idx(static_cast<size_t>(n));
      for (auto& i : idx) i = rng.range(0, int(rows) - 1);
      if (n > 2) idx[1] = idx[0];  // a Medusa row's hidden state, once per head
      std::vector<float> out[2];
      Device* devs[2] = {dev, ref};
      for (int d = 0; d < 2; d++) {
        auto sb = put(devs[d], src);
        auto ib = put(devs[d], idx);
        auto ob = put(devs[d], std::vector<float>(size_t(n * H)));
        devs[d]->gather_rows(sb.data(), ld, ib.data(), n, H, ob.data());
        out[d] = get(devs[d], ob, size_t(n * H));
      }
      ck.compare("gather_rows", dims("gather_rows", {{"n", n}, {"H", H}, {"ld", ld}}), out[0].data(), out[1].data(),
                 out[0].size(), 0, 0);
    }
  for (int bs : {16, 32, 5})
    for (int nrows : {1, 7, 133}) {
      const int blocks = 4096;
      std::vector<int32_t> perm(blocks);
      for (int i = 0; i < blocks; i++) perm[size_t(i)] = i;
      for (int i = blocks - 1; i > 0; i--) std::swap(perm[size_t(i)], perm[size_t(rng.range(0, i))]);
      struct RowSpec {
        int tok_start, n, cache_len, table;
      };
      std::vector<RowSpec> specs;
      int T = 0, next = 0;
      for (int r = 0; r < nrows; r++) {
        const int n = rng.range(0, 2) ? 1 : rng.range(2, 40), cache_len = rng.range(0, 1) ? rng.range(0, 300) : 0;
        specs.push_back({T, n, cache_len, next});
        next += (cache_len + n + bs - 1) / bs;
        T += n;
      }
      // kv-copy lists over the first row's table: indices inside it, repeats allowed.
      const int copies = 17, reach = specs[0].cache_len + specs[0].n;
      std::vector<int32_t> cidx(copies);
      for (auto& c : cidx) c = rng.range(0, reach - 1);
      std::vector<int32_t> slots[2], cslots[2];
      Device* devs[2] = {dev, ref};
      for (int d = 0; d < 2; d++) {
        auto tables = put(devs[d], perm);
        auto ci = put(devs[d], cidx);
        std::vector<AttnRow> rows;
        for (const RowSpec& sp : specs) rows.push_back({sp.tok_start, sp.n, sp.cache_len, tables.data() + sp.table, nullptr});
        auto sb = put(devs[d], std::vector<int32_t>(size_t(T), -7));
        auto cb = put(devs[d], std::vector<int32_t>(size_t(copies), -7));
        devs[d]->kv_slots(rows.data(), nrows, bs, sb.data());
        devs[d]->paged_slots(tables.data(), ci.data(), copies, bs, cb.data());
        slots[d] = get(devs[d], sb, size_t(T));
        cslots[d] = get(devs[d], cb, size_t(copies));
      }
      compare_exact(ck, "kv_slots", dims("kv_slots", {{"rows", nrows}, {"T", T}, {"bs", bs}}), slots[0], slots[1]);
      compare_exact(ck, "kv_slots", dims("paged_slots", {{"n", copies}, {"bs", bs}}), cslots[0], cslots[1]);
    }
}

// tree_walk over Medusa-shaped trees (each node's parent an earlier node, the mask its
// ancestors and itself), chains without a mask, and rows that do not walk (n = 0). Tokens come
// from a small vocabulary and each node's argmax is one of its children's tokens most of the
// time, so walks go deep, stop early, and meet sibling ties (the first child wins).
void test_tree_walk(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  for (int nrows : {1, 4, 33}) {
    std::vector<int32_t> tokens, argmax;
    std::vector<uint8_t> masks;
    struct RowSpec {
      int tok_start, n, logit_start;
      int64_t mask;  // byte offset in masks, -1: causal
    };
    std::vector<RowSpec> specs;
    for (int r = 0; r < nrows; r++) {
      const int kind = rng.range(0, 3);  // 0: no walk, 1: chain, 2-3: tree
      const int n = kind == 0 ? rng.range(1, 4) : rng.range(1, 64);
      const int tok_start = int(tokens.size()), logit_start = int(argmax.size());
      std::vector<int> parent(size_t(n), -1);
      for (int c = 1; c < n; c++) parent[size_t(c)] = kind == 1 ? c - 1 : rng.range(0, c - 1);
      for (int c = 0; c < n; c++) tokens.push_back(rng.range(0, 5));
      for (int c = 0; c < n; c++) {
        std::vector<int> kids;
        for (int k = c + 1; k < n; k++)
          if (parent[size_t(k)] == c) kids.push_back(k);
        const bool follow = !kids.empty() && rng.range(0, 9) < 7;
        argmax.push_back(follow ? tokens[size_t(tok_start + kids[size_t(rng.range(0, int(kids.size()) - 1))])]
                                : rng.range(-1, 5));
      }
      int64_t mask = -1;
      if (kind >= 2) {
        mask = int64_t(masks.size());
        masks.resize(masks.size() + size_t(n) * size_t(n), 0);
        for (int c = 0; c < n; c++)
          for (int a = c; a >= 0; a = parent[size_t(a)]) masks[size_t(mask + int64_t(c) * n + a)] = 1;
      }
      specs.push_back({tok_start, kind == 0 ? 0 : n, logit_start, mask});
    }
    std::vector<int32_t> leaf[2];
    Device* devs[2] = {dev, ref};
    for (int d = 0; d < 2; d++) {
      auto tb = put(devs[d], tokens);
      auto ab = put(devs[d], argmax);
      auto mb = put(devs[d], masks);
      auto lb = put(devs[d], std::vector<int32_t>(size_t(nrows), -7));
      std::vector<LeafRow> rows;
      for (const RowSpec& sp : specs)
        rows.push_back({sp.tok_start, sp.n, sp.logit_start, sp.mask < 0 ? nullptr : mb.data() + sp.mask});
      devs[d]->tree_walk(tb.data(), ab.data(), rows.data(), nrows, lb.data());
      leaf[d] = get(devs[d], lb, size_t(nrows));
    }
    compare_exact(ck, "tree_walk", dims("tree_walk", {{"rows", nrows}, {"T", int64_t(tokens.size())}}), leaf[0], leaf[1]);
  }
}

// KV caches in each dtype. The reference's 16-bit paths against its f32 path: kv_store rounds
// (bf16/f16 of the f32 value, exactly), kv_copy moves elements exactly, and attention over a
// 16-bit cache equals attention over an f32 cache holding the same rounded values. Then the
// device in its own kv_dtype (f32 on the cpu) against the reference in that dtype.
void test_kv_dtypes(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  const int hq = 9, hkv = 3, D = 64, bs = 16, blocks = 40;
  const int64_t E = int64_t(hkv) * D, S = int64_t(blocks) * bs;
  auto round_to = [](DType dt, float v) {
    return dt == DType::F32 ? v : dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v));
  };
  // One sequence of 70 cached tokens (stored by kv_store) and a decode row plus a 5-token chunk.
  const int cached = 70, T = cached;
  const auto k = randn(rng, size_t(T) * 2 * E, 2.0f);
  std::vector<int32_t> table(static_cast<size_t>(blocks)), slot(static_cast<size_t>(T));
  for (int b = 0; b < blocks; b++) table[size_t(b)] = (b * 7) % blocks;
  for (int t = 0; t < T; t++) slot[size_t(t)] = table[size_t(t / bs)] * bs + t % bs;
  const std::vector<int32_t> from = {3, 9, 3, 60}, to = {64, 65, 9, 66};  // 9 is written, then read
  const auto q = randn(rng, size_t(6) * hq * D, 2.0f);
  std::vector<AttnRow> rows = {{0, 1, 66, nullptr, nullptr}, {1, 5, 61, nullptr, nullptr}};
  // Fill both caches from `cache` (raw bytes in dt, K = V) or by kv_store + kv_copy, run
  // attention, and return it with the K cache widened to f32.
  auto run = [&](Device* d, DType dt, const void* cache, std::vector<float>* kc_out, std::vector<float>* attn) {
    const int64_t bytes = S * E * dtype_size(dt);
    DeviceBuffer<uint8_t> kc, vc;
    (void)kc.allocate(d, bytes, "self-test");
    (void)vc.allocate(d, bytes, "self-test");
    kc.zero();
    vc.zero();
    auto kb = put(d, k);
    auto sb = put(d, slot), fb = put(d, from), tb = put(d, to), tab = put(d, table);
    auto qb = put(d, q);
    if (cache) {
      d->upload(kc.data(), cache, bytes);
      d->upload(vc.data(), cache, bytes);
    } else {
      d->kv_store(kb.data(), kb.data() + E, T, 2 * E, sb.data(), E, dt, kc.data(), vc.data());
      d->kv_copy(fb.data(), tb.data(), int64_t(from.size()), E, dt, kc.data(), vc.data());
    }
    std::vector<AttnRow> r = rows;
    for (auto& row : r) row.block_table = tab.data();
    auto ob = put(d, std::vector<float>(size_t(6) * hq * D));
    const AttnShape shape{hq, hkv, D, bs, 0.125f, dt};
    d->attention(qb.data(), int64_t(hq) * D, kc.data(), vc.data(), r.data(), int(r.size()), shape, ob.data());
    *attn = get(d, ob, size_t(6) * hq * D);
    *kc_out = widen(get(d, kc, size_t(bytes)), dt);  // the K cache in f32, for the exact checks
  };
  for (DType dt : {DType::BF16, DType::F16}) {
    std::vector<float> kc16, attn16, attn32;
    run(ref, dt, nullptr, &kc16, &attn16);
    std::vector<float> expect(size_t(S * E), 0.0f);  // kv_store then kv_copy, by hand, rounded
    for (int t = 0; t < T; t++)
      for (int64_t e = 0; e < E; e++) expect[size_t(slot[size_t(t)] * E + e)] = round_to(dt, k[size_t(t * 2 * E + e)]);
    for (size_t i = 0; i < from.size(); i++)
      for (int64_t e = 0; e < E; e++) expect[size_t(to[i] * E + e)] = expect[size_t(from[i] * E + e)];
    ck.compare("kv_dtype", std::string("reference kv_store+kv_copy ") + dtype_name(dt), kc16.data(), expect.data(),
               expect.size(), 0, 0);
    // attention over the 16-bit cache == over an f32 cache of the same values (K = V here).
    const std::vector<uint8_t> half = to_dtype(kc16, dt);
    std::vector<float> unused, attn16_same;
    run(ref, dt, half.data(), &unused, &attn16_same);
    run(ref, DType::F32, kc16.data(), &unused, &attn32);
    ck.compare("kv_dtype", std::string("reference attention ") + dtype_name(dt) + " vs f32 of the same values",
               attn16_same.data(), attn32.data(), attn32.size(), 1e-6, 1e-6);
  }
  // The device in the dtype it keeps its caches in, against the reference.
  const DType dt = dev->kv_dtype();
  std::vector<float> kc_a, at_a, kc_b, at_b;
  run(dev, dt, nullptr, &kc_a, &at_a);
  run(ref, dt, nullptr, &kc_b, &at_b);
  ck.compare("kv_dtype", std::string("kv_store+kv_copy ") + dtype_name(dt), kc_a.data(), kc_b.data(), kc_a.size(), 0, 0);
  ck.compare("kv_dtype", std::string("attention kv ") + dtype_name(dt), at_a.data(), at_b.data(), at_a.size(), 1e-5,
             1e-4);
}

// Sampled rows over a Llama-3-sized vocabulary shaped like a trained model's logits: a handful
// of tokens well above a long bell-shaped tail (half the rows quantised to 1/8, so thousands of
// exact ties), at temperature 0.8 with top-p 0.95, typical-p 0.9, both, and top-k above the heap
// limit (5000 before top-p, 20000 alone). Top-p and typical-p keep hundreds to tens of thousands
// of tokens here, and the draw's inverse CDF runs over all of them. Each logits row is sampled
// under every setting with several seeds. Tokens must be equal.
// Device::sample of rows `ps` (their penalties and masks already in dev's memory) over logits
// [.., V] in dev's memory, with every output poisoned first; the outputs read back.
struct SampleOut {
  std::vector<int32_t> tok, top;
  std::vector<float> lp, tlp;
};
SampleOut run_sample(Device* dev, const DeviceBuffer<float>& x, int64_t V, const std::vector<SampleParams>& ps,
                     int max_top) {
  const int R = int(ps.size());
  DeviceBuffer<uint8_t> scratch;
  (void)scratch.allocate(dev, R * sample_row_scratch_bytes(V), "self-test");
  auto tb = put(dev, std::vector<int32_t>(size_t(R), -7));
  auto lb = put(dev, std::vector<float>(size_t(R), -7));
  auto ib = put(dev, std::vector<int32_t>(size_t(R * max_top), -7));
  auto jb = put(dev, std::vector<float>(size_t(R * max_top), -7));
  dev->sample(x.data(), V, V, ps.data(), R, max_top, tb.data(), lb.data(), ib.data(), jb.data(), scratch.data());
  return {get(dev, tb, size_t(R)), get(dev, ib, size_t(R * max_top)), get(dev, lb, size_t(R)),
          get(dev, jb, size_t(R * max_top))};
}

// Top-p's and typical-p's cut inside a group of tied tokens: 2-12 tokens share the top logit at
// scattered ids (the rest far below), and top-p or typical-p keeps part of the group, which
// must be its lowest ids ((key, id) order). A cut one token off changes the draw for a large
// share of the rows, which sample their few kept tokens with 6 seeds each. Tokens must be equal.
void test_sample_cut(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  const int64_t V = 4096;
  const int rows = 24, seeds = 6;
  std::vector<float> logits(size_t(rows * V));
  for (int r = 0; r < rows; r++) {
    float* row = logits.data() + int64_t(r) * V;
    for (int64_t v = 0; v < V; v++) row[v] = rng.uniform(-2, 2);
    for (int h = rng.range(2, 12); h > 0; h--) row[rng.range(0, int(V) - 1)] = 14.0f;
  }
  std::vector<SampleParams> params;
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < seeds; i++) {
      SampleParams p;
      p.row = r;
      p.temperature = 1.0;
      const bool typical = r % 3 == 2;
      p.top_p = typical ? 1.0 : rng.pick({0.1, 0.3, 0.5, 0.7});
      p.typical_p = typical ? rng.pick({0.2, 0.5}) : 1.0;
      p.seed = rng.next();
      params.push_back(p);
    }
  const int R = int(params.size());
  SampleOut out[2];
  Device* devs[2] = {dev, ref};
  for (int d = 0; d < 2; d++) out[d] = run_sample(devs[d], put(devs[d], logits), V, params, 1);
  compare_exact(ck, "sample", dims("sample cut in ties", {{"V", V}, {"rows", R}}) + " token", out[0].tok, out[1].tok);
}

void test_sample_spread(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  const int64_t V = 128256;
  const int rows = 4, max_top = 2;
  std::vector<float> logits(size_t(rows * V));
  for (int r = 0; r < rows; r++) {
    float* row = logits.data() + int64_t(r) * V;
    const float sigma = rng.pick({1.5f, 3.0f}), gap = rng.pick({0.5f, 4.0f, 8.0f});
    const bool ties = r % 2 == 1;
    float top = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
      const float g = (rng.uniform(-1, 1) + rng.uniform(-1, 1) + rng.uniform(-1, 1)) * sigma;
      row[v] = ties ? std::round(g * 8) / 8 : g;
      top = std::max(top, row[v]);
    }
    for (int h = rng.pick({3, 30}); h > 0; h--) row[rng.range(0, int(V) - 1)] = top + rng.uniform(0, gap);
  }
  struct Setting {
    double top_p, typical_p;
    int top_k, seeds;
  };
  const Setting settings[] = {{0.95, 1, 0, 3}, {1, 0.9, 0, 2}, {0.95, 0.9, 0, 1}, {0.95, 1, 5000, 1}, {1, 1, 20000, 1}};
  std::vector<SampleParams> params;
  for (int r = 0; r < rows; r++)
    for (const Setting& st : settings)
      for (int i = 0; i < st.seeds; i++) {
        SampleParams p;
        p.row = r;
        p.temperature = 0.8;
        p.top_p = st.top_p;
        p.typical_p = st.typical_p;
        p.top_k = st.top_k;
        p.seed = rng.next();
        p.draws = uint64_t(rng.range(0, 40));
        p.top_logprobs = 1;
        params.push_back(p);
      }
  const int R = int(params.size());
  SampleOut out[2];
  Device* devs[2] = {dev, ref};
  for (int d = 0; d < 2; d++) out[d] = run_sample(devs[d], put(devs[d], logits), V, params, max_top);
  const std::string what = dims("sample spread", {{"V", V}, {"rows", R}});
  compare_exact(ck, "sample", what + " token", out[0].tok, out[1].tok);
  ck.compare("sample", what + " logprob", out[0].lp.data(), out[1].lp.data(), size_t(R), 2e-4, 1e-5);
}

// Device::sample against the reference sampler (the JS sampler's port; test/device-sampler.test.ts
// holds that port to the JS itself): vocabularies of SmolLM2, Llama-2, Llama-3 and Qwen2, batches
// 1..64, rows greedy (temperature 0 or top-k 1), sampled (top-k at, below and above the heap
// limit 1024, top-p, typical-p, tiny temperatures), penalised (histories with out-of-vocabulary
// ids) and masked (sparse and dense masks, a terminated grammar's eos with a -inf logit), logits
// with ties, -inf holes and NaN. Token ids and top-logprob ids must be equal; logprobs within f32
// rounding of the normaliser.
void test_sample(Device* dev, Device* ref, Rng& rng, Checker& ck) {
  struct Shape {
    int64_t V;
    int rows;
  };
  for (const Shape sh : {Shape{49152, 64}, Shape{32000, 33}, Shape{128256, 7}, Shape{151936, 1}, Shape{151936, 8},
                         Shape{4096, 64}}) {
    const int64_t V = sh.V, W = (V + 31) / 32;
    const int R = sh.rows, max_top = 8;
    std::vector<float> logits(size_t(R * V));
    std::vector<uint32_t> masks(size_t(R * W), 0);
    std::vector<PenaltyToken> pens;
    std::vector<SampleParams> params(static_cast<size_t>(R));
    std::vector<int> pen_start(static_cast<size_t>(R) + 1, 0);
    std::vector<int> kinds(static_cast<size_t>(R));
    for (int r = 0; r < R; r++) {
      float* row = logits.data() + int64_t(r) * V;
      const int shape = rng.range(0, 3);  // smooth, peaked, quantised (ties), with -inf holes
      const float scale = rng.pick({0.5f, 3.0f, 10.0f});
      for (int64_t v = 0; v < V; v++) {
        const float g = rng.uniform(-scale, scale);
        row[v] = shape == 2 ? std::round(g) : shape == 3 && rng.range(0, 3) == 0 ? -INFINITY : g;
      }
      if (shape == 1)
        for (int i = 0; i < 6; i++) row[rng.range(0, int(V) - 1)] = rng.uniform(10, 30);
      if (rng.range(0, 19) == 0) row[rng.range(0, int(V) - 1)] = NAN;
      SampleParams& p = params[size_t(r)];
      const int kind = rng.range(0, 4);  // 0 greedy, 1 sampled, 2 penalised, 3 masked, 4 all of them
      kinds[size_t(r)] = kind;
      p.row = r;
      p.temperature = kind == 0 ? 0.0 : rng.pick({0.3, 0.7, 1.0, 1.4, 1e-25});
      p.top_k = kind == 0 ? rng.pick({0, 1}) : rng.pick({0, 0, 1, 7, 50, 1500});
      p.top_p = kind == 0 ? 1.0 : rng.pick({1.0, 0.9, 0.5});
      p.typical_p = kind == 0 ? 1.0 : rng.pick({1.0, 1.0, 0.8});
      p.seed = rng.next();
      p.draws = uint64_t(rng.range(0, 40));
      p.top_logprobs = rng.pick({0, 1, 5, 8});
      if (kind == 2 || kind == 4) {
        p.repetition_penalty = rng.pick({1.0, 1.3, 0.7});
        p.frequency_penalty = rng.pick({0.0, 0.5});
        p.presence_penalty = rng.pick({0.0, -0.4, 1.0});
        std::vector<int32_t> seen;
        for (int i = rng.range(1, 60); i > 0; i--) {
          const int32_t id = rng.range(0, 9) == 0 ? rng.range(0, 99) : rng.range(0, int(V) - 1);
          if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
          seen.push_back(id);
          pens.push_back({id, rng.range(0, 2) == 0 ? 0 : rng.range(1, 5)});
        }
        pens.push_back({int32_t(V) + 3, 2});  // out of the vocabulary: skipped
      }
      pen_start[size_t(r) + 1] = int(pens.size());
      if (kind == 3 || kind == 4) {
        uint32_t* m = masks.data() + int64_t(r) * W;
        if (rng.range(0, 3) == 0) {  // a terminated grammar: only eos, scored -inf here
          const int eos = rng.range(0, int(V) - 1);
          m[eos >> 5] |= 1u << (eos & 31);
          row[eos] = -INFINITY;
          p.allowed_lift = true;
        } else {
          const int density = rng.pick({1, 50, 95});  // percent
          for (int64_t v = 0; v < V; v++)
            if (rng.range(0, 99) < density) m[v >> 5] |= 1u << (v & 31);
        }
      }
    }
    SampleOut out[2];
    Device* devs[2] = {dev, ref};
    for (int d = 0; d < 2; d++) {
      auto xb = put(devs[d], logits);
      auto mb = put(devs[d], masks);
      auto pb = put(devs[d], pens);
      std::vector<SampleParams> ps = params;
      for (int r = 0; r < R; r++) {
        SampleParams& p = ps[size_t(r)];
        p.penalties = pb.data() + pen_start[size_t(r)];
        p.n_penalties = pen_start[size_t(r) + 1] - pen_start[size_t(r)];
        if (kinds[size_t(r)] >= 3) p.allowed = mb.data() + int64_t(r) * W;
      }
      out[d] = run_sample(devs[d], xb, V, ps, max_top);
    }
    const std::string what = dims("sample", {{"V", V}, {"rows", R}});
    compare_exact(ck, "sample", what + " token", out[0].tok, out[1].tok);
    compare_exact(ck, "sample", what + " top ids", out[0].top, out[1].top);
    // NaN rows report NaN logprobs on both sides; compare the finite ones.
    for (auto* v : {&out[0].lp, &out[1].lp, &out[0].tlp, &out[1].tlp})
      for (float& f : *v) f = std::isfinite(f) ? f : 0.0f;
    ck.compare("sample", what + " logprob", out[0].lp.data(), out[1].lp.data(), size_t(R), 2e-4, 1e-5);
    ck.compare("sample", what + " top logprobs", out[0].tlp.data(), out[1].tlp.data(), size_t(R * max_top), 2e-4,
               1e-5);
  }
  test_sample_spread(dev, ref, rng, ck);
  test_sample_cut(dev, ref, rng, ck);
}

#if LOOM_AMX_BF16
// The AMX kernels run on threads other code uses too (libuv's pool runs other addons' work, e.g.
// llama.cpp's ggml, which configures its tiles once per thread and relies on them after): a call
// must leave the thread's tile configuration as it found it (configured by someone else, or
// released), or that code's next tile instruction faults (SIGILL). Checked on this thread with
// amx_dot_rows directly (the pool may run a device matmul elsewhere).
void test_amx_tile_state(Checker& ck) {
  if (!amx_usable()) return;
  const int64_t K = 64, N = 16, T = 16;
  std::vector<uint16_t> w(size_t(N * K), f32_to_bf16(0.5f)), xb(size_t(T * K), f32_to_bf16(1.0f));
  std::vector<uint16_t> xv(size_t(16 * K));
  std::vector<float> y(size_t(T * N), -1.0f), want(size_t(T * N), 0.5f * float(K));
  amx_pack_tokens(xb.data(), T, K, K, xv.data());
  const MatmulJob job{{w.data(), DType::BF16, N, K}, nullptr, y.data(), N};
  // Another library's configuration: palette 1, one 8-row x 32-byte tile.
  alignas(64) uint8_t foreign[64] = {};
  foreign[0] = 1;
  const uint16_t colsb = 32;
  std::memcpy(foreign + 16, &colsb, 2);
  foreign[48] = 8;
  alignas(64) uint8_t after[64];
  _tile_loadconfig(foreign);
  amx_dot_rows(xv.data(), T, job, 0, N, false);
  _tile_storeconfig(after);
  _tile_release();
  compare_exact(ck, "amx tile state", "a configured thread keeps its configuration",
                std::vector<uint8_t>(after, after + 64), std::vector<uint8_t>(foreign, foreign + 64));
  ck.compare("amx tile state", "the products under a foreign configuration", y.data(), want.data(), y.size(), 0, 0);
  amx_dot_rows(xv.data(), T, job, 0, N, false);
  _tile_storeconfig(after);
  compare_exact(ck, "amx tile state", "an unconfigured thread is left released", std::vector<uint8_t>(after, after + 64),
                std::vector<uint8_t>(64, 0));
}
#endif

}  // namespace

namespace {

// The result's report and device-fault handling, shared by both entry points.
void finish(Device* device, Checker& ck, SelfTestResult& res) {
  for (auto& kv : ck.worst) res.report += kv.first + ": " + kv.second.second + "\n";
  const Status last = device->synchronize();
  if (!last.ok() && g_fault.ok()) g_fault = last;
  if (!g_fault.ok()) {
    // A device fault makes every result after it meaningless, however close the numbers look.
    res.ok = false;
    res.failures++;
    res.worst_case = "device fault: " + g_fault.message;
    res.report += "device fault: " + g_fault.message + "\n";
  }
}

}  // namespace

namespace {

// The self-test's families in the order run_kernel_self_test runs them, by the names
// run_self_test_families takes. An entry's place in the list seeds its cases (family_rng).
struct Family {
  const char* name;
  void (*run)(Device* dev, Device* ref, Rng& rng, Checker& ck);
};
const Family kFamilies[] = {
    {"matmul", test_matmul},
    {"matmul", test_rmsnorm_matmul},
    {"matmul_q8", test_matmul_q8},
    {"q8_convert", [](Device*, Device*, Rng& rng, Checker& ck) { test_q8_convert(rng, ck); }},
    {"elementwise", test_elementwise},
    {"attention", test_attention},
    {"lora", test_lora},
    {"lora_apply", test_lora_apply},
    {"cache", test_cache},
    {"cache", test_rope_kv_store},
    {"step_ops", test_step_ops},
    {"tree_walk", test_tree_walk},
    {"kv_dtypes", test_kv_dtypes},
    {"sample", test_sample},
    // Last: an entry's place seeds the entries after it (this one has its own seed).
    {"matmul", [](Device* dev, Device* ref, Rng&, Checker& ck) { test_rmsnorm_matmul_prefill(dev, ref, ck); }},
};

}  // namespace

namespace {

// kFamilies[index]'s own stream of the seed: its cases do not depend on the families run before it.
Rng family_rng(uint64_t seed, size_t index) {
  Rng mix{seed ^ (uint64_t(index + 1) * 0xd1b54a32d192ed03ull)};
  return Rng{mix.next()};
}

void note_failed_family(SelfTestResult& res, const std::string& name) {
  if (std::find(res.failed_families.begin(), res.failed_families.end(), name) == res.failed_families.end())
    res.failed_families.push_back(name);
}

// Runs kFamilies[index], noting it as failed when it adds a failing case or the first device fault.
void run_family(size_t index, Device* device, uint64_t seed, Checker& ck, SelfTestResult& res) {
  const Family& family = kFamilies[index];
  const int failures_before = res.failures;
  const bool faulted_before = !g_fault.ok();
  Rng rng = family_rng(seed, index);
  family.run(device, reference_device(), rng, ck);
  if (res.failures > failures_before || (!faulted_before && !g_fault.ok())) note_failed_family(res, family.name);
}

// finish(), attributing a fault only its final wait saw to the last family run.
void finish_families(Device* device, Checker& ck, SelfTestResult& res, const char* last_family) {
  const bool faulted_before = !g_fault.ok();
  finish(device, ck, res);
  if (!faulted_before && !g_fault.ok() && last_family != nullptr) note_failed_family(res, last_family);
}

}  // namespace

SelfTestResult run_self_test_families(Device* device, uint64_t seed, const std::vector<std::string>& families) {
  SelfTestResult res;
  Checker ck{&res, {}};
  g_fault = Status::Ok();
  const char* last = nullptr;
  for (const std::string& name : families) {
    bool known = false;  // a name may cover several entries ("cache", "matmul"): each runs, in order
    for (size_t i = 0; i < std::size(kFamilies); i++)
      if (name == kFamilies[i].name) {
        run_family(i, device, seed, ck, res);
        last = kFamilies[i].name;
        known = true;
      }
    if (!known) {
      res.ok = false;
      res.failures++;
      res.worst_case = "unknown self-test family " + name;
    }
  }
  finish_families(device, ck, res, last);
  return res;
}

SelfTestResult run_kernel_self_test(Device* device, uint64_t seed) {
  SelfTestResult res;
  Checker ck{&res, {}};
  g_fault = Status::Ok();
  for (size_t i = 0; i < std::size(kFamilies); i++) run_family(i, device, seed, ck, res);
#if LOOM_AMX_BF16
  if (std::string(device->name()) == "cpu") test_amx_tile_state(ck);
#endif
  finish_families(device, ck, res, kFamilies[std::size(kFamilies) - 1].name);
  return res;
}

}  // namespace loom
