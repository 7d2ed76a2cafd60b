// Load-time Q8 quantisation (see quantize-q8.h). Runs on the loading worker thread, once per
// matrix; plain scalar code that the compiler vectorises: a 135M model quantises in well under a
// second, next to the page faults of reading the file.
#include "runtime/quantize-q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace loom {

void quantize_q8_rows(const void* src, DType src_dtype, int64_t rows, int64_t K, uint8_t* dst) {
  const int64_t nb = K / kQ8Block;
  float w[kQ8Block];
  for (int64_t n = 0; n < rows; n++) {
    uint8_t* row = dst + n * q8_row_bytes(K);
    for (int64_t b = 0; b < nb; b++) {
      float amax = 0;
      for (int64_t i = 0; i < kQ8Block; i++) {
        w[i] = load_weight(src, src_dtype, n * K + b * kQ8Block + i);
        amax = std::max(amax, std::fabs(w[i]));
      }
      const uint16_t d16 = f32_to_f16(amax / 127.0f);
      const float d = f16_to_f32(d16);
      const float id = d > 0 ? 1.0f / d : 0.0f;
      for (int64_t i = 0; i < kQ8Block; i++) {
        // nearbyint: round half to even, as the kernels' vector conversions round.
        const float q = std::min(127.0f, std::max(-127.0f, std::nearbyint(w[i] * id)));
        row[b * kQ8Block + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
      std::memcpy(row + K + b * 2, &d16, 2);
    }
  }
}

Status check_q8_quantizable(const WeightView& w, const std::string& name) {
  if (w.dtype == DType::Q8) return Status::Error("model_invalid", "tensor " + name + " is already int8");
  if (w.cols % kQ8Block != 0)
    return Status::Error("model_invalid", "weights: int8 needs every projection's input size to be a multiple of " +
                                              std::to_string(kQ8Block) + " (blocks of " + std::to_string(kQ8Block) +
                                              " along K); tensor " + name + " is [" + std::to_string(w.rows) + ", " +
                                              std::to_string(w.cols) + "]: use weights: auto for this model");
  return Status::Ok();
}

}  // namespace loom
