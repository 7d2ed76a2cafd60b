// A STREAM-like probe of the machine's memory read bandwidth, so the benchmark can state its
// decode speed as a fraction of the bandwidth roofline measured in the same run (the roofline of
// a weight-bound decode step is bytes_read / bandwidth, and the bandwidth differs by machine).
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

// Semantics: buf = a `bytes`-sized f32 buffer, touched once (page faults excluded from timing);
//   repeat `repeats` times: every thread sums its contiguous 1/threads slice; GB/s = bytes / time.
// Returns the GB/s (1e9 bytes per second) of each repetition, in order. Empty when the buffer
// cannot be allocated. The sums are kept so the compiler cannot drop the reads.
std::vector<double> measure_read_bandwidth(int64_t bytes, int threads, int repeats);

}  // namespace loom
