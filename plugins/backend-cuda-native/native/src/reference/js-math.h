// Math.exp and Math.log exactly as V8 (Node) computes them: fdlibm's __ieee754_exp and
// __ieee754_log (Sun Microsystems, 1993; V8's src/base/ieee754.cc is this code), so a sampler
// mirroring the JS one gets bit-identical probabilities. glibc's exp/log and CUDA's differ from
// them in the last bit for some inputs, and one bit is enough to move a seeded draw.
//
// Compiles for host and device (LOOM_HD). Every product that feeds a sum goes through js_mul so
// nvcc cannot contract it into an FMA (JS never fuses); on the host, the files that include this
// header turn contraction off (`#pragma GCC optimize("fp-contract=off")`, see sampler-core.h).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif

namespace loom {
namespace js {

LOOM_HD double js_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

LOOM_HD uint32_t hi_word(double x) {
  uint64_t b;
  memcpy(&b, &x, 8);
  return uint32_t(b >> 32);
}
LOOM_HD uint32_t lo_word(double x) {
  uint64_t b;
  memcpy(&b, &x, 8);
  return uint32_t(b);
}
LOOM_HD double with_hi_word(double x, uint32_t hi) {
  uint64_t b;
  memcpy(&b, &x, 8);
  b = (uint64_t(hi) << 32) | (b & 0xffffffffull);
  memcpy(&x, &b, 8);
  return x;
}

// fdlibm e_exp.c: exp(x) = 2^k * exp(r), r = x - k ln2 in [-0.5 ln2, 0.5 ln2], exp(r) by a
// degree-5 Remez polynomial of r^2.
LOOM_HD double exp(double x) {
  const double one = 1.0, huge = 1.0e+300, twom1000 = 9.33263618503218878990e-302;
  const double o_threshold = 7.09782712893383973096e+02, u_threshold = -7.45133219101941108420e+02;
  const double ln2hi = 6.93147180369123816490e-01, ln2lo = 1.90821492927058770002e-10;
  const double invln2 = 1.44269504088896338700e+00;
  const double P1 = 1.66666666666666019037e-01, P2 = -2.77777777770155933842e-03, P3 = 6.61375632143793436117e-05,
               P4 = -1.65339022054652515390e-06, P5 = 4.13813679705723846039e-08;
  double hi = 0, lo = 0;
  int k = 0;
  uint32_t hx = hi_word(x);
  const int xsb = int(hx >> 31);
  hx &= 0x7fffffffu;
  if (hx >= 0x40862E42u) {  // |x| >= 709.78...
    if (hx >= 0x7ff00000u) {
      if (((hx & 0xfffffu) | lo_word(x)) != 0) return x + x;  // NaN
      return xsb == 0 ? x : 0.0;                              // exp(+-inf) = {inf, 0}
    }
    if (x > o_threshold) return js_mul(huge, huge);
    if (x < u_threshold) return js_mul(twom1000, twom1000);
  }
  if (hx > 0x3fd62e42u) {    // |x| > 0.5 ln2
    if (hx < 0x3FF0A2B2u) {  // and |x| < 1.5 ln2
      hi = xsb ? x + ln2hi : x - ln2hi;
      lo = xsb ? -ln2lo : ln2lo;
      k = 1 - xsb - xsb;
    } else {
      k = int(js_mul(invln2, x) + (xsb ? -0.5 : 0.5));
      const double t = k;
      hi = x - js_mul(t, ln2hi);  // t * ln2hi is exact here
      lo = js_mul(t, ln2lo);
    }
    x = hi - lo;
  } else if (hx < 0x3e300000u) {  // |x| < 2^-28
    if (huge + x > one) return one + x;
  } else {
    k = 0;
  }
  const double t = js_mul(x, x);
  const double c = x - js_mul(t, P1 + js_mul(t, P2 + js_mul(t, P3 + js_mul(t, P4 + js_mul(t, P5)))));
  if (k == 0) return one - (js_mul(x, c) / (c - 2.0) - x);
  double y = one - ((lo - js_mul(x, c) / (2.0 - c)) - hi);
  if (k >= -1021) return with_hi_word(y, hi_word(y) + (uint32_t(k) << 20));
  y = with_hi_word(y, hi_word(y) + (uint32_t(k + 1000) << 20));
  return js_mul(y, twom1000);
}

// fdlibm e_log.c: log(x) = k ln2 + log(1 + f), log(1 + f) = 2s + s R(s^2), s = f / (2 + f).
LOOM_HD double log(double x) {
  const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10,
               two54 = 1.80143985094819840000e+16;  // fdlibm's -two54/0 and (x-x)/0 are built from bits below
  const double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01, Lg3 = 2.857142874366239149e-01,
               Lg4 = 2.222219843214978396e-01, Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
               Lg7 = 1.479819860511658591e-01;
  int32_t hx = int32_t(hi_word(x));
  const uint32_t lx = lo_word(x);
  int k = 0;
  if (hx < 0x00100000) {  // x < 2^-1022
    if (((hx & 0x7fffffff) | int32_t(lx)) == 0) return with_hi_word(0.0, 0xfff00000u);  // log(+-0) = -inf
    if (hx < 0) return with_hi_word(0.0, 0x7ff80000u);                                   // log(-#) = NaN
    k -= 54;
    x = js_mul(x, two54);  // subnormal: scale up
    hx = int32_t(hi_word(x));
  }
  if (hx >= 0x7ff00000) return x + x;
  k += (hx >> 20) - 1023;
  hx &= 0x000fffff;
  int32_t i = (hx + 0x95f64) & 0x100000;
  x = with_hi_word(x, uint32_t(hx | (i ^ 0x3ff00000)));  // normalise x or x/2
  k += (i >> 20);
  const double f = x - 1.0;
  if ((0x000fffff & (2 + hx)) < 3) {  // |f| < 2^-20
    if (f == 0.0) {
      if (k == 0) return 0.0;
      const double dk = double(k);
      return js_mul(dk, ln2_hi) + js_mul(dk, ln2_lo);
    }
    const double R = js_mul(js_mul(f, f), 0.5 - js_mul(0.33333333333333333, f));
    if (k == 0) return f - R;
    const double dk = double(k);
    return js_mul(dk, ln2_hi) - ((R - js_mul(dk, ln2_lo)) - f);
  }
  const double s = f / (2.0 + f);
  const double dk = double(k);
  const double z = js_mul(s, s);
  i = hx - 0x6147a;
  const double w = js_mul(z, z);
  const int32_t j = 0x6b851 - hx;
  const double t1 = js_mul(w, Lg2 + js_mul(w, Lg4 + js_mul(w, Lg6)));
  const double t2 = js_mul(z, Lg1 + js_mul(w, Lg3 + js_mul(w, Lg5 + js_mul(w, Lg7))));
  i |= j;
  const double R = t2 + t1;
  if (i > 0) {
    const double hfsq = js_mul(js_mul(0.5, f), f);
    if (k == 0) return f - (hfsq - js_mul(s, hfsq + R));
    return js_mul(dk, ln2_hi) - ((hfsq - (js_mul(s, hfsq + R) + js_mul(dk, ln2_lo))) - f);
  }
  if (k == 0) return f - js_mul(s, f - R);
  return js_mul(dk, ln2_hi) - ((js_mul(s, f - R) - js_mul(dk, ln2_lo)) - f);
}

}  // namespace js
}  // namespace loom
