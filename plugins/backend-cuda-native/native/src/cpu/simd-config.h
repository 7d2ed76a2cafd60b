// Which vector path the cpu kernels compile to. The build uses -march=native, so this is decided
// by the build machine: AVX-512 (F, BW, VL, DQ: 32 zmm registers, masked loads, 16-bit masked
// loads for bf16/f16 tails) where present, else AVX2 + FMA + F16C. Both paths are checked
// against the scalar reference by the kernel self-test.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define LOOM_AVX512 1
#else
#define LOOM_AVX512 0
#endif
