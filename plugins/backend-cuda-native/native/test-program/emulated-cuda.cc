// The cuda device's kernels on the SIMT emulator (simt/emulator.h), checked against the scalar
// reference by the kernel self-test's own cases: `loom-native-test --emulate-cuda`. Built with
// LOOM_SIMT_EMULATION (this file only), on any machine, so a kernel's logic (indexing, masks,
// splits, barriers, warp shuffles) is checked in `npm test` before a GPU ever runs it.
//
// Covered so far, with the launch shapes of the cuda device:
//  - attention (cuda/attention-tc-kernels.cuh for 16-bit caches at head dims 64 and 128, else
//    cuda/attention-kernels.cuh) with the device's host-side plan at the SM count of an H100 (132), in
//    f32, f16 and bf16 caches (the cuda device keeps f16): the self-test's attention cases;
//  - argmax, top_k, log_sum_exp (cuda/vocab-kernels.cuh): its elementwise cases (whose other ops
//    are the reference's here, so they compare the reference with itself);
//  - tree_walk (vocab-kernels.cuh) and sample (cuda/sampler-kernels.cuh): their cases;
//  - embedding, rmsnorm, silu_mul, silu_residual, rope, rope_tables, gather_rows, kv_slots,
//    paged_slots, kv_store, kv_copy (cuda/elementwise-kernels.cuh): the elementwise, step-op,
//    cache and KV-dtype cases;
//  - lora_shrink, lora_expand, lora_apply (cuda/lora-kernels.cuh, the device's launch plans): the
//    LoRA cases;
//  - matmul's kernels (cuda/matmul-kernels.cuh, cuda/prefill-gemm-kernels.cuh,
//    cuda/skinny-gemm-kernels.cuh, cuda/wgmma-gemm-kernels.cuh), chosen per job as the device
//    chooses: the matmul cases. The tensor-core GEMMs run with the emulated mma.sync and ldmatrix
//    (fragments by the PTX ISA's layouts) and cp.async (copies that land at the issuing thread's
//    wait: cuda/tensor-core.cuh); the wgmma GEMMs with the emulated wgmma (128B-swizzled operands
//    read through their descriptors when the group is waited for: cuda/wgmma.cuh), TMA box loads
//    and mbarriers (loads that land when a thread waits on their barrier: cuda/tma.cuh).
// Every other op of the emulated device is the reference's.
#include "emulated-cuda.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda/attention-kernels.cuh"
#include "cuda/attention-tc-kernels.cuh"
#include "cuda/elementwise-kernels.cuh"
#include "cuda/lora-kernels.cuh"
#include "cuda/matmul-kernels.cuh"
#include "cuda/sampler-kernels.cuh"
#include "cuda/vocab-kernels.cuh"
#include "forwarding-device.h"
#include "selftest/kernel-self-test.h"

namespace loom_emulated {
namespace {

using namespace loom;
using loom_test::ForwardingDevice;


// The SM count the emulated plan splits for: an H100 SXM's.
constexpr int kEmulatedSms = 132;

template <typename C>
void emulated_flash(const simt::dim3& grid, size_t smem, const float* q, int64_t ldq, const void* kc, const void* vc,
                    const AttnRow* rows, const AttnWorkItem* items, const AttnShape& shape, float* out,
                    float* partials, const AttnSplitGroup* groups, int* arrivals) {
  simt::launch(grid, simt::dim3(kWarps * 32), smem, [&] {
    flash_attention_kernel<C>(q, ldq, static_cast<const C*>(kc), static_cast<const C*>(vc), rows, items, shape, out,
                              partials, groups, arrivals);
  });
}

template <typename C>
void emulated_tc(const simt::dim3& grid, const float* q, int64_t ldq, const void* kc, const void* vc,
                 const AttnRow* rows, const AttnWorkItem* items, const AttnShape& shape, float* out, float* partials,
                 const AttnSplitGroup* groups, int* arrivals) {
  const size_t smem = tc_attention_smem_bytes(shape.head_dim);
  auto* k = static_cast<const C*>(kc);
  auto* v = static_cast<const C*>(vc);
  if (shape.head_dim == 64)
    simt::launch(grid, simt::dim3(4 * 32), smem, [&] {
      tc_attention_kernel<C, 64>(q, ldq, k, v, rows, items, shape, out, partials, groups, arrivals);
    });
  else
    simt::launch(grid, simt::dim3(4 * 32), smem, [&] {
      tc_attention_kernel<C, 128>(q, ldq, k, v, rows, items, shape, out, partials, groups, arrivals);
    });
}

// How matmul-kernels.cuh's launch_* helpers launch on the emulator.
auto launcher() {
  return [](auto kernel, unsigned gx, unsigned gy, unsigned gz, int threads, size_t smem, auto... args) {
    simt::launch(simt::dim3(gx, gy, gz), simt::dim3(unsigned(threads)), smem, [&] { kernel(args...); });
  };
}

// The reference's memory (host, but used as device memory) and ops, with the covered ops run as
// the cuda device runs them:
// the same plans and kernels, the same launch shapes, on the emulator. Reports f16 caches, as the
// cuda device does, so the self-test checks both cache dtypes.
class EmulatedCudaDevice final : public ForwardingDevice {
 public:
  explicit EmulatedCudaDevice(const CudaKernelPaths& paths) : ForwardingDevice(reference_device()), paths_(paths) {}
  const char* name() const override { return "emulated-cuda"; }
  DType kv_dtype() const override { return DType::F16; }
  // As the cuda device: the model keeps weights, caches and results in device memory and moves
  // them with upload/download (memcpy here), so its device-memory paths run too.
  bool reads_host_memory() const override { return false; }

  // What the plans covered: attention calls, calls with a split tile, split tiles; matmul jobs by
  // kernel; LoRA launches by where their items travel.
  std::string coverage() const {
    return "emulated attention: " + std::to_string(calls_) + " calls, " + std::to_string(split_calls_) +
           " with keys split across blocks (" + std::to_string(split_tiles_) + " split tiles), " +
           std::to_string(tc_calls_) + " on the tensor-core kernel\n" +
           "emulated matmul: " + std::to_string(gemv_jobs_) + " gemv jobs (" + std::to_string(fused_gemv_calls_) +
           " calls of several in one launch), " + std::to_string(simt_jobs_) +
           " simt jobs, " + std::to_string(tensor_core_jobs_) + " tensor-core jobs (" + std::to_string(split_jobs_) +
           " with split K), " + std::to_string(prefill_jobs_) + " prefill jobs, " +
           std::to_string(wgmma_jobs_) + " wgmma jobs, " + std::to_string(tma_jobs_) + " wgmma+tma jobs, " +
           std::to_string(skinny_jobs_) +
           " skinny jobs (" + std::to_string(skinny_split_jobs_) + " with split K)\n" +
           "emulated rmsnorm_matmul: " + std::to_string(fused_norm_calls_) + " calls with the norm in the GEMV (" +
           std::to_string(fused_norm_kept_) + " writing the normed rows), " +
           std::to_string(unfused_norm_calls_) + " as two ops, " + std::to_string(norm_rounded_calls_) +
           " with the norm writing the prefill GEMM's bf16 x\n" +
           "emulated lora: " + std::to_string(lora_lists_.inline_) + " launches with their items inline, " +
           std::to_string(lora_lists_.staged) + " staged\n" + "emulated row lists: sample " + sample_lists_.text() +
           ", kv_slots " + kv_slot_lists_.text() + ", tree_walk " + leaf_lists_.text() + "\n";
  }

  void attention(const float* q, int64_t ldq, const void* kc, const void* vc, const AttnRow* rows, int nrows,
                 const AttnShape& shape, float* out) override {
    const AttnTiling tiling = attention_tiling(shape, kc, vc, paths_.tc_attention);
    const int64_t records = plan_attention(rows, nrows, shape, tiling, kEmulatedSms, &items_, &groups_);
    calls_++;
    if (!groups_.empty()) split_calls_++;
    split_tiles_ += int64_t(groups_.size());
    if (tiling.tensor_cores) tc_calls_++;
    if (items_.empty()) return;
    partials_.assign(size_t(records * shape.num_kv_heads * (shape.head_dim + 2)), std::nanf(""));
    float* partials = partials_.data();
    // Kept across calls, as the cuda device keeps them: each call must leave them at zero.
    const size_t counts = groups_.size() * size_t(shape.num_kv_heads);
    if (arrivals_.size() < counts) arrivals_.resize(counts, 0);
    int* arrivals = arrivals_.data();
    const AttnSplitGroup* groups = groups_.data();
    const simt::dim3 grid(unsigned(items_.size()), unsigned(shape.num_kv_heads));
    if (tiling.tensor_cores) {
      if (shape.kv_dtype == DType::F16)
        emulated_tc<simt::f16>(grid, q, ldq, kc, vc, rows, items_.data(), shape, out, partials, groups, arrivals);
      else
        emulated_tc<simt::bf16>(grid, q, ldq, kc, vc, rows, items_.data(), shape, out, partials, groups, arrivals);
    } else {
      const size_t smem = attention_smem_bytes(shape.head_dim);
      switch (shape.kv_dtype) {
        case DType::F32:
          emulated_flash<float>(grid, smem, q, ldq, kc, vc, rows, items_.data(), shape, out, partials, groups,
                                arrivals);
          break;
        case DType::F16:
          emulated_flash<simt::f16>(grid, smem, q, ldq, kc, vc, rows, items_.data(), shape, out, partials, groups,
                                    arrivals);
          break;
        default:
          emulated_flash<simt::bf16>(grid, smem, q, ldq, kc, vc, rows, items_.data(), shape, out, partials, groups,
                                     arrivals);
      }
    }
    for (int count : arrivals_)
      if (count != 0) {
        std::fprintf(stderr, "emulated-cuda: attention left a split group's arrival count at %d\n", count);
        std::abort();
      }
  }

  void embedding(const int32_t* ids, int64_t T, const WeightView& table, float* y) override {
    if (T > 0)
      simt::launch(simt::dim3(element_grid(table.cols), unsigned(T)), simt::dim3(kElementThreads), 0,
                   [&] { embedding_kernel(ids, table.data, table.dtype, table.cols, y); });
  }
  void rmsnorm(const float* x, int64_t T, int64_t ldx, int64_t H, const float* w, float eps, float* y,
               int64_t ldy) override {
    if (T > 0)
      simt::launch(simt::dim3(unsigned(T)), simt::dim3(rmsnorm_threads(H)), 0,
                   [&] { rmsnorm_kernel(x, ldx, H, w, eps, y, ldy, nullptr, 0); });
  }
  void silu_mul(const float* gate, const float* up, int64_t n, float* y) override {
    if (n > 0)
      simt::launch(simt::dim3(element_grid((n + 3) / 4)), simt::dim3(kElementThreads), 0,
                   [&] { silu_mul_kernel(gate, up, n, y); });
  }
  void silu_residual(const float* t, int64_t n, float* y) override {
    if (n > 0)
      simt::launch(simt::dim3(element_grid(n)), simt::dim3(kElementThreads), 0, [&] { silu_residual_kernel(t, n, y); });
  }
  void rope(float* x, int64_t T, int64_t ldx, int heads, int D, const float* cos, const float* sin) override {
    if (T > 0)
      simt::launch(simt::dim3(unsigned(T)), simt::dim3(kRowOpThreads), 0,
                   [&] { rope_kernel(x, ldx, heads, D, cos, sin); });
  }
  void rope_tables(const int32_t* positions, int64_t T, const double* inv_freq, int64_t half, float* cos,
                   float* sin) override {
    if (T > 0 && half > 0)
      simt::launch(simt::dim3(unsigned((half + kRowOpThreads - 1) / kRowOpThreads), unsigned(T)),
                   simt::dim3(kRowOpThreads), 0, [&] { rope_tables_kernel(positions, inv_freq, half, cos, sin); });
  }
  void gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t H, float* dst) override {
    if (n > 0)
      simt::launch(simt::dim3(element_grid(H), unsigned(n)), simt::dim3(kElementThreads), 0,
                   [&] { gather_rows_kernel(src, ld, idx, H, dst); });
  }
  void kv_slots(const AttnRow* rows, int nrows, int block_size, int32_t* slot) override {
    if (nrows <= 0) return;
    const auto list = param_list<KvSlotRowList>(rows, size_t(nrows), kv_slot_lists_);
    simt::launch(simt::dim3(unsigned(nrows)), simt::dim3(kRowOpThreads), 0,
                 [&] { kv_slots_kernel(list, block_size, slot); });
  }
  void paged_slots(const int32_t* block_table, const int32_t* idx, int64_t n, int block_size, int32_t* slot) override {
    if (n > 0)
      simt::launch(simt::dim3(element_grid(n)), simt::dim3(kElementThreads), 0,
                   [&] { paged_slots_kernel(block_table, idx, n, block_size, slot); });
  }
  void rope_kv_store(float* qkv, int64_t T, int64_t ldx, int q_heads, int kv_heads, int D, const float* cos,
                     const float* sin, const int32_t* slot, DType kv_dtype, void* kc, void* vc) override {
    if (T <= 0) return;
      const simt::dim3 grid(rope_kv_store_grid(q_heads, kv_heads, D), unsigned(T)), block(kElementThreads);
    auto run = [&](auto* k_cache, auto* v_cache) {
      simt::launch(grid, block, 0,
                   [&] { rope_kv_store_kernel(qkv, ldx, q_heads, kv_heads, D, cos, sin, slot, k_cache, v_cache); });
    };
    switch (kv_dtype) {
      case DType::F32: run(static_cast<float*>(kc), static_cast<float*>(vc)); break;
      case DType::F16: run(static_cast<simt::f16*>(kc), static_cast<simt::f16*>(vc)); break;
      default: run(static_cast<simt::bf16*>(kc), static_cast<simt::bf16*>(vc));
    }
  }
  void kv_store(const float* k, const float* v, int64_t T, int64_t ldk, const int32_t* slot, int64_t E, DType kv_dtype,
                void* kc, void* vc) override {
    if (T <= 0) return;
    const simt::dim3 grid(element_grid(E), unsigned(T)), block(kElementThreads);
    switch (kv_dtype) {
      case DType::F32:
        simt::launch(grid, block, 0, [&] {
          kv_store_kernel(k, v, ldk, slot, E, static_cast<float*>(kc), static_cast<float*>(vc));
        });
        break;
      case DType::F16:
        simt::launch(grid, block, 0, [&] {
          kv_store_kernel(k, v, ldk, slot, E, static_cast<simt::f16*>(kc), static_cast<simt::f16*>(vc));
        });
        break;
      default:
        simt::launch(grid, block, 0, [&] {
          kv_store_kernel(k, v, ldk, slot, E, static_cast<simt::bf16*>(kc), static_cast<simt::bf16*>(vc));
        });
    }
  }
  void kv_copy(const int32_t* from, const int32_t* to, int64_t n, int64_t E, DType kv_dtype, void* kc,
               void* vc) override {
    if (n > 0)
      simt::launch(simt::dim3(1), simt::dim3(kKvCopyThreads), 0, [&] {
        kv_copy_kernel(from, to, n, E * dtype_size(kv_dtype) / 2, static_cast<uint16_t*>(kc),
                       static_cast<uint16_t*>(vc));
      });
  }

  // As the cuda device: the norm folded into the GEMV where it can be, or writing the prefill
  // GEMM's bf16 x.
  void rmsnorm_matmul(const float* x, int64_t T, int64_t ldx, const float* norm_w, float eps, float* xn, bool keep_xn,
                      const MatmulJob* jobs, int njobs) override {
    if (T <= 0 || njobs <= 0) return;
    if (launch_rmsnorm_gemv(x, T, ldx, norm_w, eps, xn, keep_xn, jobs, njobs, 132, paths_, launcher())) {
      gemv_jobs_ += njobs, fused_norm_calls_++;
      if (keep_xn) fused_norm_kept_++;
      return;
    }
    // The next matmul call's GPU, taken only when this route is (else matmul takes it), so the
    // route and the two ops each meet both kinds of call.
    const CallConfig c = call_config(matmul_calls_);
    if (norm_rounds_prefill_x(jobs, njobs, T, c.sms, c.paths)) {
      matmul_calls_++;
      const int64_t H = jobs[0].w.cols;
      prefill_x_.resize(size_t(T * H));
      simt::launch(simt::dim3(unsigned(T)), simt::dim3(rmsnorm_threads(H)), 0, [&] {
        rmsnorm_kernel(x, ldx, H, norm_w, eps, keep_xn ? xn : nullptr, H, prefill_x_.data(), H);
      });
      const MatmulScratch scratch{nullptr, 0, prefill_x_.data(), H, nullptr, 0, DType::BF16};
      for (int i = 0; i < njobs; i++)
        count_job(launch_matmul_job(xn, T, H, jobs[i], false, c.sms, c.paths, scratch, launcher()), jobs[i], T, c, 0);
      norm_rounded_calls_++;
      return;
    }
    unfused_norm_calls_++;
    Device::rmsnorm_matmul(x, T, ldx, norm_w, eps, xn, keep_xn, jobs, njobs);
  }

  // A matmul call's GPU as the emulator plays it. Every other call as an H100 (132 SMs: the
  // self-test's tensor-core shapes get split K), else as one SM (never split, and every bf16 job
  // of 64 tokens or more takes the prefill GEMM), so every form of the GEMMs is checked; and every
  // other pair of calls without the wgmma GEMM, and every other four of those without its TMA
  // form, so the prefill jobs take all three kernels.
  struct CallConfig {
    int sms;
    CudaKernelPaths paths;
  };
  CallConfig call_config(int64_t call) const {
    CallConfig c{(call % 2) ? 132 : 1, paths_};
    c.paths.wgmma = paths_.wgmma && (call / 2) % 2 == 0;
    c.paths.tma = paths_.tma && (call / 4) % 2 == 0;
    return c;
  }
  // Counts a launched job by the path it took (`need`: its split-K workspace, 0 when unsplit).
  void count_job(MatmulPath path, const MatmulJob& j, int64_t T, const CallConfig& c, int64_t need) {
    switch (path) {
      case MatmulPath::kPrefill:
        if (prefill_takes_wgmma(T, j.w.rows, c.sms, c.paths)) {
          (c.paths.tma ? tma_jobs_ : wgmma_jobs_)++;  // the emulated tensor maps never fail
        } else {
          prefill_jobs_++;
        }
        break;
      case MatmulPath::kTensorCore:
        tensor_core_jobs_++;
        if (need > 0) split_jobs_++;
        break;
      case MatmulPath::kSkinny:
        skinny_jobs_++;
        if (need > 0) skinny_split_jobs_++;
        break;
      case MatmulPath::kGemv: gemv_jobs_++; break;
      case MatmulPath::kSimt: simt_jobs_++; break;
    }
  }

  void matmul(const float* x, int64_t T, int64_t ldx, const MatmulJob* jobs, int njobs, bool accumulate) override {
    if (T <= 0) return;
    auto launch = launcher();
    const CallConfig c = call_config(matmul_calls_++);
    const int sms = c.sms;
    const CudaKernelPaths& paths = c.paths;
    if (gemv_fusable(jobs, njobs, T, sms, paths)) {  // as the cuda device: one launch for the call
      launch_gemv(x, T, ldx, jobs, njobs, accumulate, no_gemv_norm(), launch);
      gemv_jobs_ += njobs, fused_gemv_calls_++;
      return;
    }
    const int64_t cols = prefill_x_cols(jobs, njobs, T, sms, paths);
    if (cols > 0) {  // as the cuda device: x rounded once for the call's prefill jobs
      prefill_x_.resize(size_t(cols * T));
      launch_round_x(x, T, ldx, cols, prefill_x_.data(), cols, launch);
    }
    const TcX tcx = tc_x_cols(jobs, njobs, T, sms, cols > 0, paths);
    if (tcx.cols > 0) {  // and split once for its tensor-core jobs
      tc_x_.resize(size_t(2 * tcx.cols * T));
      launch_split_x(x, T, ldx, tcx.cols, tcx.dtype, tc_x_.data(), tcx.cols, launch);
    }
    for (int i = 0; i < njobs; i++) {
      if (jobs[i].w.rows <= 0) continue;
      const int64_t need = tc_split_floats(jobs[i], T, sms, paths);
      if (need > int64_t(split_partials_.size())) split_partials_.resize(size_t(need));
      const MatmulScratch scratch{split_partials_.data(), int64_t(split_partials_.size()),
                                  cols > 0 ? prefill_x_.data() : nullptr, cols,
                                  tcx.cols > 0 ? tc_x_.data() : nullptr, tcx.cols, tcx.dtype};
      count_job(launch_matmul_job(x, T, ldx, jobs[i], accumulate, sms, paths, scratch, launch), jobs[i], T, c, need);
    }
  }

  void lora_shrink(const float* x, int64_t ldx, int64_t K, const LoraSegment* segs, int nsegs, float* tmp,
                   int64_t ldt) override {
    LoraLaunch p;
    if (nsegs <= 0 || !plan_lora_shrink(K, segs, nsegs, false, &p)) return;
    shrink(x, ldx, K, p, tmp, ldt, 0);
  }
  void lora_expand(const float* tmp, int64_t ldt, int64_t N, const LoraSegment* segs, int nsegs, float* y,
                   int64_t ldy) override {
    if (nsegs <= 0) return;
    LoraLaunch p;
    lora_expand_items(segs, nsegs, y, ldy, N, &p);
    expand(tmp, ldt, p, 1, 0, nullptr);
  }
  // As the cuda device: K slices of one tile into planes of scratch, added by the expand.
  void lora_apply(const float* x, int64_t ldx, int64_t K, const LoraSegment* shrink_segs, const LoraSegment* expand_segs,
                  const int* module, int nsegs, const LoraOutput* outs, float* tmp, int64_t ldt) override {
    LoraLaunch sp, ep;
    if (nsegs <= 0 || !plan_lora_shrink(K, shrink_segs, nsegs, true, &sp)) return;
    lora_apply_items(expand_segs, module, nsegs, outs, &ep);
    const int64_t plane = sp.ksplit > 1 ? sp.t_span * ldt : 0;
    lora_planes_.assign(size_t(sp.ksplit > 1 ? plane * sp.ksplit : 0), std::nanf(""));
    float* planes = sp.ksplit > 1 ? lora_planes_.data() : tmp;
    shrink(x, ldx, K, sp, planes, ldt, plane);
    expand(planes, ldt, ep, sp.ksplit, plane, sp.ksplit > 1 ? tmp : nullptr);
  }

  void argmax(const float* x, int64_t T, int64_t ld, int64_t V, int32_t* out) override {
    if (T > 0) simt::launch(simt::dim3(unsigned(T)), simt::dim3(kRowThreads), 0, [&] { argmax_kernel(x, ld, V, out); });
  }
  void top_k(const float* x, int64_t T, int64_t ld, int64_t V, int K, const int32_t* ids, int32_t* out) override {
    if (T > 0 && K > 0)
      simt::launch(simt::dim3(unsigned(T)), simt::dim3(kRowThreads), 0, [&] { top_k_kernel(x, ld, V, K, ids, out); });
  }
  void log_sum_exp(const float* x, int64_t T, int64_t ld, int64_t V, double* out) override {
    if (T > 0)
      simt::launch(simt::dim3(unsigned(T)), simt::dim3(kRowThreads), 0, [&] { log_sum_exp_kernel(x, ld, V, out); });
  }
  void tree_walk(const int32_t* tokens, const int32_t* argmax, const LeafRow* rows, int nrows, int32_t* leaf) override {
    if (nrows <= 0) return;
    const auto list = param_list<LeafRowList>(rows, size_t(nrows), leaf_lists_);
    simt::launch(simt::dim3(unsigned((nrows + 63) / 64)), simt::dim3(64), 0,
                 [&] { tree_walk_kernel(tokens, argmax, list, nrows, leaf); });
  }
  void sample(const float* x, int64_t ld, int64_t V, const SampleParams* params, int nrows, int max_top, int32_t* token,
              float* logprob, int32_t* top_ids, float* top_logprobs, void* scratch) override {
    if (nrows <= 0) return;
    const int64_t stride = sample_row_scratch_bytes(V);
    const auto list = param_list<SampleParamList>(params, size_t(nrows), sample_lists_);
    simt::launch(simt::dim3(unsigned(nrows)), simt::dim3(kSampleThreads), 0, [&] {
      sample_kernel(x, ld, V, list, max_top, token, logprob, top_ids, top_logprobs, static_cast<uint8_t*>(scratch),
                    stride);
    });
  }

 private:
  // Launches of one kind by how their list travelled.
  struct ListCount {
    int64_t inline_ = 0, staged = 0;
    std::string text() const { return std::to_string(inline_) + " inline / " + std::to_string(staged) + " staged"; }
  };
  // A launch's list as the cuda device passes it (CudaDevice::param_list): inline when it fits,
  // else "staged" (here the host array itself: emulated device memory is host memory).
  template <class List, typename T>
  static List param_list(const T* items, size_t n, ListCount& count) {
    const bool fit = fits_inline<List>(n);
    (fit ? count.inline_ : count.staged)++;
    return fit ? inline_params<List>(items, n) : staged_params<List>(items);
  }
  void shrink(const float* x, int64_t ldx, int64_t K, const LoraLaunch& p, float* tmp, int64_t ldt, int64_t plane) {
    const auto items = param_list<LoraItemList>(p.items.data(), p.items.size(), lora_lists_);
    dispatch_lora_shrink(p, [&](auto kernel) {
      simt::launch(simt::dim3(p.grid_x, p.grid_y, p.grid_z), simt::dim3(kShrinkWarps * 32), 0,
                   [&] { kernel(x, ldx, K, items, tmp, ldt, p.rgroups, p.kslice, plane); });
    });
  }
  void expand(const float* tmp, int64_t ldt, LoraLaunch& p, int ksplit, int64_t plane, float* tmp_out) {
    if (!plan_lora_expand(&p)) return;
    const auto items = param_list<LoraItemList>(p.items.data(), p.items.size(), lora_lists_);
    dispatch_lora_expand(p, [&](auto kernel) {
      simt::launch(simt::dim3(p.grid_x, p.grid_y, p.grid_z), simt::dim3(kExpandThreads), 0,
                   [&] { kernel(tmp, ldt, items, ksplit, plane, tmp_out); });
    });
  }

  std::vector<AttnWorkItem> items_;
  std::vector<AttnSplitGroup> groups_;
  int64_t tc_calls_ = 0;
  std::vector<float> partials_, lora_planes_;
  std::vector<int> arrivals_;  // attention's split arrival counts
  int64_t calls_ = 0, split_calls_ = 0, split_tiles_ = 0;
  ListCount lora_lists_, sample_lists_, kv_slot_lists_, leaf_lists_;
  int64_t fused_norm_calls_ = 0, fused_norm_kept_ = 0, unfused_norm_calls_ = 0, norm_rounded_calls_ = 0;
  int64_t gemv_jobs_ = 0, simt_jobs_ = 0, tensor_core_jobs_ = 0, split_jobs_ = 0, matmul_calls_ = 0, fused_gemv_calls_ = 0;
  int64_t skinny_jobs_ = 0, skinny_split_jobs_ = 0;
  int64_t prefill_jobs_ = 0, wgmma_jobs_ = 0, tma_jobs_ = 0;
  std::vector<float> split_partials_;  // split-K's workspace
  std::vector<uint16_t> prefill_x_;    // the prefill GEMM's bf16 x
  std::vector<uint16_t> tc_x_;         // the tensor-core GEMM's x in 16-bit halves [2, T, K]
  const CudaKernelPaths paths_;        // the optional kernel paths taken, as the cuda device's
};

}  // namespace

std::unique_ptr<loom::Device> make_emulated_cuda_device(const loom::CudaKernelPaths& paths) {
  return std::make_unique<EmulatedCudaDevice>(paths);
}

loom::SelfTestResult run_emulated_cuda_check(uint64_t seed, const loom::CudaKernelPaths& paths,
                                             const std::vector<std::string>& families) {
  EmulatedCudaDevice device(paths);
  const std::vector<std::string> covered = {"matmul", "attention", "elementwise", "step_ops", "cache",
                                            "kv_dtypes", "lora", "lora_apply", "tree_walk", "sample"};
  loom::SelfTestResult r = loom::run_self_test_families(&device, seed, families.empty() ? covered : families);
  r.report += device.coverage();
  return r;
}

}  // namespace loom_emulated
