// The SIMT emulator's scheduler (see emulator.h): fibers on one OS thread, switched round-robin
// at barriers, one block at a time.
#include "simt/emulator.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#if !defined(__x86_64__)
#error "the SIMT emulator's fiber switch is x86-64 assembly"
#endif

// simt_switch(save, load): push the callee-saved registers, store the stack pointer to *save,
// load `load` as the stack pointer, pop that fiber's registers and return into it.
extern "C" void simt_switch(void** save, void* load);
asm(R"(
    .text
    .globl simt_switch
    .type simt_switch, @function
simt_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size simt_switch, .-simt_switch
)");

namespace simt {
namespace detail {
const ThreadState* running = nullptr;
uint64_t* running_exchange = nullptr;
int* running_exchange_half = nullptr;
const ThreadState host_state{};
}  // namespace detail

namespace {

constexpr size_t kStackBytes = size_t(128) << 10;
constexpr size_t kGatherBytes = 64;

enum class Wait { kNone, kBlock, kWarp };

struct Fiber {
  void* sp = nullptr;
  ThreadState state;
  int warp = 0;
  int exchange_half = 0;  // next_exchange's alternation
  bool done = false;
  Wait wait = Wait::kNone;
  uint64_t wait_gen = 0;
};

struct Barrier {
  uint64_t gen = 0;
  int arrived = 0, live = 0;
  int members = 0;  // threads the group started with (a warp: 32, or fewer in a partial last warp)
  // One arrival; true when it completes the barrier (which then releases everyone).
  bool arrive() {
    if (++arrived < live) return false;
    gen++;
    arrived = 0;
    return true;
  }
  // A thread of the barrier's group finished: the others no longer wait for it.
  void leave() {
    live--;
    if (arrived > 0 && arrived >= live) {
      gen++;
      arrived = 0;
    }
  }
};

struct Launch {
  dim3 grid, block;
  const std::function<void()>* kernel = nullptr;
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<uint8_t> smem;
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<uint64_t> exchange;  // [warps, 2, 32]: next_exchange
  std::vector<uint8_t> gather;     // [warps, 32, kGatherBytes]: warp_exchange
  // Statically sized __shared__ variables of the current block, by declaration.
  std::vector<std::pair<const void*, std::unique_ptr<uint8_t[]>>> statics;
  int or_accumulator = 0, or_result = 0;
  uint64_t or_generation = UINT64_MAX;
  Fiber* cur = nullptr;
  void* scheduler_sp = nullptr;
};

Launch* g_launch = nullptr;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "simt emulator: %s\n", what);
  std::abort();
}

void yield_to_scheduler() {
  Launch& L = *g_launch;
  simt_switch(&L.cur->sp, L.scheduler_sp);
}

// First code of every fiber: run the kernel, leave the barriers, never return.
void fiber_entry() {
  Launch& L = *g_launch;
  (*L.kernel)();
  Fiber& f = *L.cur;
  f.done = true;
  L.block_barrier.leave();
  L.warp_barriers[size_t(f.warp)].leave();
  yield_to_scheduler();
  fail("a finished fiber was resumed");
}

bool runnable(const Launch& L, const Fiber& f) {
  if (f.done) return false;
  switch (f.wait) {
    case Wait::kBlock: return L.block_barrier.gen > f.wait_gen;
    case Wait::kWarp: return L.warp_barriers[size_t(f.warp)].gen > f.wait_gen;
    default: return true;
  }
}

void run_block(Launch& L, const dim3& block_idx) {
  const int n = int(L.block.x * L.block.y * L.block.z), warps = (n + 31) / 32;
  L.fibers.assign(size_t(n), Fiber{});
  L.block_barrier = Barrier{0, 0, n};
  L.warp_barriers.assign(size_t(warps), Barrier{});
  for (int w = 0; w < warps; w++)
    L.warp_barriers[size_t(w)].live = L.warp_barriers[size_t(w)].members = std::min(32, n - 32 * w);
  // Stale bytes, not zeros (CUDA gives no zeros): 0xFF reads as NaN in every float type and -1 as
  // an integer, so a read of shared memory no thread wrote poisons the result instead of passing
  // as a tiny number.
  std::fill(L.smem.begin(), L.smem.end(), uint8_t(0xFF));
  L.statics.clear();
  L.or_accumulator = 0;
  L.or_generation = UINT64_MAX;
  while (L.stacks.size() < size_t(n)) L.stacks.emplace_back(new char[kStackBytes]);
  for (int i = 0; i < n; i++) {
    Fiber& f = L.fibers[size_t(i)];
    f.state.block_idx = block_idx;
    f.state.thread_idx = dim3(unsigned(i) % L.block.x, unsigned(i) / L.block.x % L.block.y,
                              unsigned(i) / (L.block.x * L.block.y));
    f.state.linear = i;
    f.warp = i / 32;
    // A fresh stack that simt_switch "returns" into fiber_entry from: six zeroed registers, then
    // the return address; 16-byte aligned so fiber_entry starts with the ABI's alignment.
    char* top = L.stacks[size_t(i)].get() + kStackBytes;
    auto* sp = reinterpret_cast<uintptr_t*>((reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15)) - 64);
    for (int r = 0; r < 6; r++) sp[r] = 0;
    sp[6] = reinterpret_cast<uintptr_t>(&fiber_entry);
    f.sp = sp;
  }
  for (;;) {
    bool progress = false, all_done = true;
    for (Fiber& f : L.fibers) {
      if (!f.done) all_done = false;
      if (!runnable(L, f)) continue;
      f.wait = Wait::kNone;
      L.cur = &f;
      detail::running = &f.state;
      detail::running_exchange = &L.exchange[size_t(f.warp) * 64];
      detail::running_exchange_half = &f.exchange_half;
      simt_switch(&L.scheduler_sp, f.sp);
      progress = true;
    }
    if (all_done) break;
    if (!progress) fail("deadlock: threads wait at barriers that cannot complete (a barrier under divergent control flow?)");
  }
  L.cur = nullptr;
  detail::running = nullptr;
  detail::running_exchange = nullptr;
  detail::running_exchange_half = nullptr;
}

}  // namespace

const dim3& block_dim() { return g_launch->block; }
const dim3& grid_dim() { return g_launch->grid; }
void* dynamic_shared_bytes() { return g_launch->smem.data(); }

void* block_static(const void* key, size_t bytes, size_t align) {
  Launch& L = *g_launch;
  for (auto& [k, mem] : L.statics)
    if (k == key) return mem.get();
  if (align > 16) fail("__shared__ alignment above 16 bytes");
  L.statics.emplace_back(key, std::unique_ptr<uint8_t[]>(new uint8_t[bytes]));  // new[] aligns to 16
  std::memset(L.statics.back().second.get(), 0xFF, bytes);  // see run_block's fill
  return L.statics.back().second.get();
}

int sync_block_or(int predicate) {
  Launch& L = *g_launch;
  if (predicate) L.or_accumulator = 1;
  sync_block();
  // Every thread has contributed. The barrier's generation is the same for all of them until the
  // next barrier completes: the first to wake publishes and resets the accumulator, and the second
  // barrier keeps any thread's next contribution after everyone has read the result.
  if (L.or_generation != L.block_barrier.gen) {
    L.or_generation = L.block_barrier.gen;
    L.or_result = L.or_accumulator;
    L.or_accumulator = 0;
  }
  const int result = L.or_result;
  sync_block();
  return result;
}

void sync_block() {
  Launch& L = *g_launch;
  Fiber& f = *L.cur;
  f.wait_gen = L.block_barrier.gen;
  L.block_barrier.arrive();
  f.wait = Wait::kBlock;
  yield_to_scheduler();
}

void yield() {
  g_launch->cur->wait = Wait::kNone;
  yield_to_scheduler();
}

void sync_warp() {
  Launch& L = *g_launch;
  Fiber& f = *L.cur;
  Barrier& b = L.warp_barriers[size_t(f.warp)];
  // A full-warp shuffle (every one the kernels use) after some lanes returned is undefined on a
  // GPU: the exited lanes' values are garbage, or the warp hangs.
  if (b.live < b.members) fail("a warp shuffle after lanes of the warp exited");
  f.wait_gen = b.gen;
  b.arrive();
  f.wait = Wait::kWarp;
  yield_to_scheduler();
}

void warp_exchange(const void* mine, size_t bytes, void* all) {
  if (bytes > kGatherBytes) fail("warp_exchange of more than 64 bytes per lane");
  Launch& L = *g_launch;
  const Fiber& f = *L.cur;
  uint8_t* row = &L.gather[size_t(f.warp) * 32 * kGatherBytes];
  std::memcpy(row + size_t(f.state.linear % 32) * kGatherBytes, mine, bytes);
  sync_warp();
  for (int lane = 0; lane < 32; lane++)
    std::memcpy(static_cast<uint8_t*>(all) + size_t(lane) * bytes, row + size_t(lane) * kGatherBytes, bytes);
  sync_warp();  // nobody overwrites its contribution before every lane has read
}

void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& kernel) {
  if (g_launch) fail("a kernel launched from inside a kernel");
  Launch L;
  L.grid = grid;
  L.block = block;
  L.kernel = &kernel;
  L.smem.assign(smem, 0);
  const size_t warps = (block.x * block.y * block.z + 31) / 32;
  L.exchange.assign(warps * 64, 0);  // [warps, 2, 32]: next_exchange's two halves
  L.gather.assign(warps * 32 * kGatherBytes, 0);
  g_launch = &L;
  // A GPU runs blocks in no promised order: every other launch runs them last to first, so a
  // kernel whose result depends on the order (say, on which block of a group arrives last) fails.
  static unsigned long long launches = 0;
  const bool reversed = launches++ % 2 == 1;
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  for (unsigned long long i = 0; i < blocks; i++) {
    const unsigned long long b = reversed ? blocks - 1 - i : i;
    run_block(L, dim3(unsigned(b % grid.x), unsigned(b / grid.x % grid.y), unsigned(b / grid.x / grid.y)));
  }
  g_launch = nullptr;
}

}  // namespace simt
