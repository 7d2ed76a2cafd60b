// <immintrin.h> for the cpu kernels, without GCC 12's false -Wuninitialized warnings: its
// AVX-512 shuffles, extracts and conversions pass `_mm512_undefined_ps()` as a don't-care source,
// which GCC 12 reports at every inlined use (hundreds of lines in a build; GCC bug 105593, fixed
// in 13). The warnings point into the header, so ignoring them while it is parsed silences
// exactly those and nothing in our code.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
