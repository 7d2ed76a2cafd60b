// A persistent pool of worker threads for the CPU device.
//
// One decode step runs ~15 parallel regions per layer, so waking threads through the OS for each
// would cost more than the work: workers spin briefly between regions and only sleep on a
// condition variable after a quiet spell (between steps). The calling thread always takes part.
//
// A region is split into chunks (by default 4 per thread) that threads claim from one atomic
// ticket, rather than one fixed share per thread. On a dedicated machine this behaves like a
// static split; on a shared one (more runnable threads than cores) it is what keeps a step from
// stalling: a descheduled worker simply claims fewer chunks and the caller does the rest, instead
// of every region waiting a whole scheduler time slice for that worker's fixed share. Waiting
// loops also yield the core now and then, so a spinning thread does not starve the one it waits for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  // Chunks per thread of a region: enough to rebalance around a descheduled thread, few enough
  // that each chunk is still a long contiguous run of weight rows for the hardware prefetcher.
  static constexpr int kChunksPerThread = 4;

  // nthreads counts the caller: ThreadPool(1) starts no worker and runs everything inline.
  explicit ThreadPool(int nthreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return nthreads_; }

  // Semantics: for c < nchunks (in any order, on any threads): f(c, nchunks); returns when all
  // calls have returned. nchunks defaults to size() * kChunksPerThread (1 with one thread).
  // f must not depend on which thread runs a chunk, except through thread_local scratch. Not
  // reentrant: a region must not start another region.
  template <typename F>
  void run(F&& f, int nchunks = 0) {
    using Fn = typename std::remove_reference<F>::type;
    run_raw([](void* ctx, int c, int n) { (*static_cast<Fn*>(ctx))(c, n); },
            const_cast<void*>(static_cast<const void*>(&f)), nchunks);
  }

 private:
  using RawFn = void (*)(void*, int, int);
  void run_raw(RawFn fn, void* ctx, int nchunks);
  void worker_loop();
  // Claim and run chunks of the region named by the ticket until none is left; returns how
  // many this thread ran.
  int drain();

  // ticket_ = generation << 44 | nchunks << 32 | next chunk. One fetch_add both claims a chunk
  // and tells the claimer which region (and how many chunks) it belongs to, so a worker that
  // wakes late can never run a chunk of a region that already finished.
  static constexpr int kGenShift = 44, kCountShift = 32;
  static constexpr uint64_t kNextMask = (uint64_t(1) << kCountShift) - 1, kCountMask = 0xfff;

  int nthreads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> done_{0};      // chunks of the current region that have returned
  std::atomic<int> sleeping_{0};  // workers parked on cv_
  std::atomic<bool> stop_{false};
  uint64_t generation_ = 0;  // caller side only
  RawFn fn_ = nullptr;       // the current region, published by the ticket store
  void* ctx_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
};

// Split [0, total) into `parts` contiguous ranges whose starts are multiples of `align`;
// returns part `index` as [begin, end).
inline void split_range(int64_t total, int parts, int index, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (total + align - 1) / align;
  const int64_t b = units * index / parts, e = units * (index + 1) / parts;
  *begin = b * align < total ? b * align : total;
  *end = e * align < total ? e * align : total;
}

}  // namespace loom
