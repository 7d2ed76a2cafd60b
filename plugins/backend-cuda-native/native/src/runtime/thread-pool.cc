// ThreadPool: spin-then-sleep workers; see thread-pool.h for why.
#include "runtime/thread-pool.h"

#include <chrono>
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() std::this_thread::yield()
#endif

namespace loom {
namespace {
// How long an idle worker spins before parking. Regions inside a step are microseconds apart;
// steps are milliseconds apart, so this keeps workers hot within a step and idle between steps.
constexpr auto kSpinFor = std::chrono::microseconds(300);
}  // namespace

ThreadPool::ThreadPool(int nthreads) : nthreads_(nthreads < 1 ? 1 : nthreads) {
  for (int tid = 1; tid < nthreads_; tid++) workers_.emplace_back([this, tid] { worker_loop(tid); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_raw(RawFn fn, void* ctx) {
  if (nthreads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  pending_.store(nthreads_ - 1);
  generation_.fetch_add(1);  // seq_cst: publishes fn_/ctx_ and orders against sleeping_ below
  if (sleeping_.load() > 0) {
    // Taking the lock means a worker is either before its predicate check (it will see the new
    // generation) or already waiting (it gets this notify): no lost wake-up.
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  fn(ctx, 0, nthreads_);
  while (pending_.load(std::memory_order_acquire) != 0) LOOM_PAUSE();
}

void ThreadPool::worker_loop(int tid) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      const auto start = std::chrono::steady_clock::now();
      int spins = 0;
      while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
        LOOM_PAUSE();
        if (++spins % 256 == 0 && std::chrono::steady_clock::now() - start > kSpinFor) {
          std::unique_lock<std::mutex> lock(mu_);
          sleeping_.fetch_add(1);
          cv_.wait(lock, [&] { return generation_.load() != seen; });
          sleeping_.fetch_sub(1);
          gen = generation_.load();
          break;
        }
      }
    }
    if (stop_.load()) return;
    seen = gen;
    fn_(ctx_, tid, nthreads_);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace loom
