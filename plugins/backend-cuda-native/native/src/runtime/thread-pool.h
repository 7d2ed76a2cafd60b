// A persistent pool of worker threads for the CPU device. One decode step runs ~15 parallel
// regions per layer, so waking threads through the OS for each would cost more than the work:
// workers spin briefly on a generation counter between regions and only sleep on a condition
// variable after a quiet spell (between steps). The calling thread always takes part as thread 0.
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
  // nthreads counts the caller: ThreadPool(1) starts no worker and runs everything inline.
  explicit ThreadPool(int nthreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return nthreads_; }

  // Run f(tid, nthreads) once on every thread and return when all have finished. Not reentrant:
  // a region must not start another region.
  template <typename F>
  void run(F&& f) {
    using Fn = typename std::remove_reference<F>::type;
    run_raw([](void* ctx, int tid, int n) { (*static_cast<Fn*>(ctx))(tid, n); }, const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  using RawFn = void (*)(void*, int, int);
  void run_raw(RawFn fn, void* ctx);
  void worker_loop(int tid);

  int nthreads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};  // bumped once per region
  std::atomic<int> pending_{0};          // workers still running the current region
  std::atomic<int> sleeping_{0};         // workers parked on cv_
  std::atomic<bool> stop_{false};
  RawFn fn_ = nullptr;
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
