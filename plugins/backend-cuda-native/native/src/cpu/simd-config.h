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

// 8-bit dot products (vpdpbusd) for Q8 weights: AVX-512 VNNI, where the build machine has it
// (Zen 4+, Ice Lake+). Without it Q8 rows are widened to f32 (matmul-cpu.cc). LOOM_Q8_WIDEN
// forces the widening path (to measure one against the other).
#if LOOM_AVX512 && defined(__AVX512VNNI__) && !defined(LOOM_Q8_WIDEN)
#define LOOM_AVX512_VNNI 1
#else
#define LOOM_AVX512_VNNI 0
#endif

// The same int8 × int8 dot products with plain AVX2 (vpsignb + vpmaddubsw + vpmaddwd, as
// llama.cpp's AVX2 Q8_0 kernel), where AVX-512 is missing. LOOM_Q8_WIDEN forces the widening path.
#if !LOOM_AVX512 && !defined(LOOM_Q8_WIDEN)
#define LOOM_AVX2_Q8_DOT 1
#else
#define LOOM_AVX2_Q8_DOT 0
#endif
// Whether matmul_q8 (matmul-q8-cpu.cc) exists: an integer dot kernel for Q8 weights.
#define LOOM_Q8_DOT (LOOM_AVX512_VNNI || LOOM_AVX2_Q8_DOT)

// bf16 dot products (vdpbf16ps) for bf16 weights in steps of many tokens: AVX-512 BF16 (Zen 4+,
// Sapphire Rapids+). LOOM_BF16_NO_DOT turns the path off (to measure against it).
#if LOOM_AVX512 && defined(__AVX512BF16__) && !defined(LOOM_BF16_NO_DOT)
#define LOOM_AVX512_BF16 1
#else
#define LOOM_AVX512_BF16 0
#endif

// AMX bf16 tiles (tdpbf16ps, 16 x 16 x 32 per instruction) for the same many-token bf16 matmuls,
// where the build machine has them (Sapphire Rapids and newer Xeons); used only once the kernel
// grants the process AMX state (matmul-bf16-amx.cc). LOOM_NO_AMX turns them off.
#if LOOM_AVX512_BF16 && defined(__AMX_TILE__) && defined(__AMX_BF16__) && !defined(LOOM_NO_AMX)
#define LOOM_AMX_BF16 1
#else
#define LOOM_AMX_BF16 0
#endif

// AMX int8 tiles (tdpbssd) for Q8 matmuls of many tokens, beside the bf16 ones (and granted
// the same way).
#if LOOM_AMX_BF16 && LOOM_AVX512_VNNI && defined(__AMX_INT8__)
#define LOOM_AMX_INT8 1
#else
#define LOOM_AMX_INT8 0
#endif
