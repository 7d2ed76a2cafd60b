// ThreadPool: chunked regions claimed from one atomic ticket, spin-then-sleep workers; see
// thread-pool.h for why.
#include "runtime/thread-pool.h"

#include <chrono>
#if defined(__x86_64__) || defined(_M_X64)
#include "cpu/intrinsics.h"
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() std::this_thread::yield()
#endif

namespace loom {
namespace {
// How long an idle worker spins before parking. Regions inside a step are microseconds apart;
// steps are milliseconds apart, so this keeps workers hot within a step and idle between steps.
constexpr auto kSpinFor = std::chrono::microseconds(300);
// Spins between yields of the core (~a few µs): cheap when the core is ours, and when it is
// shared it lets the thread we are waiting for run.
constexpr int kSpinsPerYield = 256;
}  // namespace

ThreadPool::ThreadPool(int nthreads) : nthreads_(nthreads < 1 ? 1 : nthreads) {
  for (int i = 1; i < nthreads_; i++) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

// Shared by the caller and the workers: keep claiming chunks until a claim comes back past the
// end of its region. Claims are one fetch_add each, so two threads never run the same chunk.
int ThreadPool::drain() {
  int ran = 0;
  for (;;) {
    // A claim past the end only bumps `next`; it never touches fn_/ctx_.
    const uint64_t t = ticket_.fetch_add(1, std::memory_order_acq_rel);
    const int c = int(t & kNextMask), n = int((t >> kCountShift) & kCountMask);
    if (c >= n) return ran;
    // A valid claim pins its region: the caller cannot start the next one (and overwrite fn_)
    // until this chunk is counted in done_.
    fn_(ctx_, c, n);
    done_.fetch_add(1, std::memory_order_release);
    ran++;
  }
}

// Publish the region (fn_, ctx_, then the ticket that names it), wake parked workers, work on
// it like any worker, then wait until every chunk has returned: only then may the caller's
// stack frame (ctx) go away and the next region overwrite fn_/ctx_.
void ThreadPool::run_raw(RawFn fn, void* ctx, int nchunks) {
  if (nchunks <= 0) nchunks = nthreads_ * kChunksPerThread;
  if (nchunks > int(kCountMask)) nchunks = int(kCountMask);
  if (nthreads_ == 1) {
    fn(ctx, 0, 1);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  generation_ = (generation_ + 1) & ((uint64_t(1) << (64 - kGenShift)) - 1);
  // seq_cst store: publishes fn_/ctx_ and orders against the sleeping_ load (see worker_loop).
  ticket_.store(generation_ << kGenShift | uint64_t(nchunks) << kCountShift);
  if (sleeping_.load() > 0) {
    // Taking the lock means a worker is either before its predicate check (it will see the new
    // ticket) or already waiting (it gets this notify): no lost wake-up.
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  drain();
  for (int spins = 1; done_.load(std::memory_order_acquire) != nchunks; spins++) {
    LOOM_PAUSE();
    if (spins % kSpinsPerYield == 0) std::this_thread::yield();
  }
}

// Wait for a ticket with a new generation (spin, yielding now and then; park after kSpinFor),
// then drain it. `seen` only decides when to wait: a worker that wakes after its region ended
// finds nothing left to claim and goes back to waiting.
void ThreadPool::worker_loop() {
  uint64_t seen = 0;  // generation of the last region this worker looked at
  for (;;) {
    uint64_t gen = ticket_.load(std::memory_order_acquire) >> kGenShift;
    if (gen == seen && !stop_.load(std::memory_order_relaxed)) {
      const auto start = std::chrono::steady_clock::now();
      for (int spins = 1; (gen = ticket_.load(std::memory_order_acquire) >> kGenShift) == seen; spins++) {
        LOOM_PAUSE();
        if (spins % kSpinsPerYield != 0) continue;
        if (stop_.load(std::memory_order_relaxed)) break;
        if (std::chrono::steady_clock::now() - start < kSpinFor) {
          std::this_thread::yield();
          continue;
        }
        std::unique_lock<std::mutex> lock(mu_);
        sleeping_.fetch_add(1);
        cv_.wait(lock, [&] { return (ticket_.load() >> kGenShift) != seen || stop_.load(); });
        sleeping_.fetch_sub(1);
        gen = ticket_.load() >> kGenShift;
        break;
      }
    }
    if (stop_.load()) return;
    seen = gen;
    drain();
  }
}

}  // namespace loom
