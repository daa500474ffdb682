#pragma once
// The SIMD layer: one float vector type `simd::VecF` for the best instruction set the compiler
// may use (chosen at compile time by xsimd: SSE2 with no -march, AVX2+FMA or AVX-512 with
// -march=native), and a one-lane scalar fallback selected by INFERKIT_FORCE_SCALAR or when
// xsimd knows no architecture for the target. Kernels use only the free functions below, so
// the same source compiles for every width. Tails shorter than a vector go through
// load_partial / store_partial, which never touch memory past the end.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#if !defined(INFERKIT_FORCE_SCALAR)
#include <xsimd/xsimd.hpp>
#if !defined(XSIMD_NO_SUPPORTED_ARCHITECTURE)
#define INFERKIT_SIMD_XSIMD 1
#endif
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif
#endif

namespace inferkit::simd {

/// The range of exp (every width): kExpLo is the first float above ln(FLT_MIN) = -126 ln 2, so
/// every nonzero result is normal; below it exp gives 0. Above kExpHi it gives +inf.
inline constexpr float kExpLo = -87.33654022216796875f, kExpHi = 88.7228394f;

#if defined(INFERKIT_SIMD_XSIMD)

using Arch = xsimd::default_arch;
using VecF = xsimd::batch<float, Arch>;
using MaskF = xsimd::batch_bool<float, Arch>;
inline constexpr std::size_t kWidth = VecF::size;
inline constexpr const char* isa_name() { return Arch::name(); }

inline VecF load(const float* p) { return VecF::load_unaligned(p); }
inline void store(float* p, VecF v) { v.store_unaligned(p); }
inline VecF broadcast(float x) { return VecF(x); }
inline VecF fma(VecF a, VecF b, VecF c) { return xsimd::fma(a, b, c); }  // a * b + c
inline VecF max(VecF a, VecF b) { return xsimd::max(a, b); }
inline VecF min(VecF a, VecF b) { return xsimd::min(a, b); }
/// e^x within 2 ulp on [kExpLo, kExpHi], 0 below (no subnormal results), +inf above, NaN kept.
/// Generic widths, Cephes-style: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-7
/// polynomial, and 2^n applied as two normal factors so the whole range stays exact. About
/// three times faster than xsimd's exp, which matters because softmax kernels call it once per
/// score. AVX-512 uses a table instead (detail::exp_table: 1.07 ulp, 13% fewer cycles).
#if defined(__AVX512F__)
namespace detail {
// e^x for x in [kExpLo, kExpHi] as v * 2^floor(k / 16), v = 2^((k mod 16) / 16) e^r in
// [0.978, 1.98]: x = k ln2 / 16 + r with |r| <= ln2 / 32 (ln2 / 16 split in two so k times the
// first part is exact), 2^(j/16) from a 16-entry table (vpermps reads the low 4 bits of each
// lane's index), and e^r = 1 + r (1 + r (1/2 + r/6)) (truncation r^4 / 24 < 1e-8). `t` is
// x 16 / ln2 + 1.5 2^23, whose addition rounds k to the nearest integer and leaves it in the low
// mantissa bits: bits(t) - bits(1.5 2^23) = k.
inline constexpr std::int32_t kExpMagicBits = 0x4B400000;  // 1.5 * 2^23
inline __m512 exp_table(__m512 x, __m512& t, __m512& k) {
  const __m512 magic = _mm512_castsi512_ps(_mm512_set1_epi32(kExpMagicBits));
  t = _mm512_fmadd_ps(x, _mm512_set1_ps(23.0831206542234f), magic);  // 16 / ln2
  k = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f / 16), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f / 16), r);
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 6), r, _mm512_set1_ps(0.5f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
  const __m512 table =
      _mm512_setr_ps(1.0f, 1.04427378242741384f, 1.09050773266525766f, 1.13878863475669165f, 1.18920711500272107f,
                     1.24185781207348405f, 1.29683955465100967f, 1.35425554693689273f, 1.41421356237309505f,
                     1.47682614593949931f, 1.54221082540794082f, 1.61049033194925431f, 1.68179283050742909f,
                     1.75625216037329948f, 1.83400808640934246f, 1.91520656139714729f);
  const __m512 tj = _mm512_permutexvar_ps(_mm512_castps_si512(t), table);
  return _mm512_fmadd_ps(_mm512_mul_ps(tj, r), q, tj);  // tj + tj r q: the leading term exact
}
}  // namespace detail
#endif
inline VecF exp(VecF x) {
  constexpr float kLo = kExpLo, kHi = kExpHi;
#if defined(__AVX512F__)
  if constexpr (kWidth == 16) {  // vscalefps applies 2^floor(k/16) with exact overflow
    const __m512 xv = x;
    __m512 t, k;
    const __m512 v =
        detail::exp_table(_mm512_min_ps(_mm512_max_ps(xv, _mm512_set1_ps(kLo)), _mm512_set1_ps(kHi)), t, k);
    __m512 res = _mm512_scalef_ps(v, _mm512_mul_ps(k, _mm512_set1_ps(0.0625f)));
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(xv, _mm512_set1_ps(kLo), _CMP_LT_OQ), _mm512_setzero_ps());
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(xv, _mm512_set1_ps(kHi), _CMP_GT_OQ),
                             _mm512_set1_ps(std::numeric_limits<float>::infinity()));
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q), xv);
  }
#endif
  using IntV = xsimd::batch<std::int32_t, Arch>;
  const VecF xc = xsimd::min(xsimd::max(x, VecF(kLo)), VecF(kHi));
  const VecF n = xsimd::nearbyint(xc * VecF(1.44269504088896341f));
  VecF r = xsimd::fnma(n, VecF(0.693359375f), xc);  // ln2 split in two: exact n * C1
  r = xsimd::fnma(n, VecF(-2.12194440e-4f), r);
  VecF p = VecF(1.9875691500e-4f);
  p = xsimd::fma(p, r, VecF(1.3981999507e-3f));
  p = xsimd::fma(p, r, VecF(8.3334519073e-3f));
  p = xsimd::fma(p, r, VecF(4.1665795894e-2f));
  p = xsimd::fma(p, r, VecF(1.6666665459e-1f));
  p = xsimd::fma(p, r, VecF(5.0000001201e-1f));
  p = xsimd::fma(p, r * r, r + VecF(1.0f));
  const IntV ni = xsimd::to_int(n);
  const IntV half = ni >> 1;
  const VecF s1 = xsimd::bitwise_cast<VecF>((half + IntV(127)) << 23);
  const VecF s2 = xsimd::bitwise_cast<VecF>((ni - half + IntV(127)) << 23);
  VecF res = p * s1 * s2;
  res = xsimd::select(x < VecF(kLo), VecF(0.0f), res);
  res = xsimd::select(x > VecF(kHi), VecF(std::numeric_limits<float>::infinity()), res);
  return xsimd::select(x != x, x, res);
}
/// exp(x) for x <= 0 or -inf, NaN excluded (logits minus their max): the same bits as exp()
/// without the overflow and NaN fix-ups, for the hottest sampling sweeps.
inline VecF exp_nonpositive(VecF x) {
#if defined(__AVX512F__)
  if constexpr (kWidth == 16) {
    // 2^floor(k/16) added to v's exponent field as an integer (v >= 0.978 and k >= -2016 on
    // [kExpLo, 0], so the sum stays a normal float: the bits of exp()'s vscalefps); lanes below
    // kExpLo (garbage t, k) are zeroed.
    const __m512 xv = x;
    __m512 t, k;
    const __m512 v = detail::exp_table(xv, t, k);
    const __m512i ki = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(detail::kExpMagicBits));
    const __m512i scale = _mm512_slli_epi32(_mm512_srai_epi32(ki, 4), 23);
    const __mmask16 live = _mm512_cmp_ps_mask(xv, _mm512_set1_ps(kExpLo), _CMP_GE_OQ);
    return _mm512_castsi512_ps(_mm512_maskz_add_epi32(live, _mm512_castps_si512(v), scale));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  if constexpr (kWidth == 8) {
    // exp()'s own steps without its clamps and fix-ups: on [kExpLo, 0] n = round(x / ln2) is at
    // least -126, so 2^n is one normal float and p * 2^n rounds once, like exp()'s exact p * s1
    // followed by * s2 (the same bits); lanes below kExpLo (-inf included) are ANDed to 0.
    // Adding 1.5 2^23 rounds the (rounded) product to the nearest integer, ties to even, like
    // exp()'s nearbyint, and leaves n in the low mantissa bits: one add instead of vroundps's two
    // uops and the float-to-int conversion.
    const __m256 xv = x;
    const __m256 magic = _mm256_castsi256_ps(_mm256_set1_epi32(0x4B400000));  // 1.5 * 2^23
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(xv, _mm256_set1_ps(1.44269504088896341f)), magic);
    const __m256 n = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xv);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i scale =  // (n + 127) << 23, n = bits(t) - bits(magic)
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    const __m256 live = _mm256_cmp_ps(xv, _mm256_set1_ps(kExpLo), _CMP_GE_OQ);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(scale)), live);
  }
#endif
  return exp(x);
}
inline VecF tanh(VecF v) { return xsimd::tanh(v); }
inline VecF select(MaskF m, VecF a, VecF b) { return xsimd::select(m, a, b); }
inline bool any(MaskF m) { return xsimd::any(m); }
inline bool all(MaskF m) { return xsimd::all(m); }
inline MaskF both(MaskF a, MaskF b) { return a && b; }
inline MaskF but_not(MaskF a, MaskF b) { return a && ~b; }
inline MaskF is_nan(VecF v) { return xsimd::isnan(v); }
inline float hsum(VecF v) { return xsimd::hadd(v); }
/// Lane i of the result is the horizontal sum of rows[i], for kWidth rows.
inline VecF haddp(const VecF* rows) {
#if defined(__AVX512F__)
  if constexpr (kWidth == 16) {
    // xsimd 8.1's AVX-512 haddp returns the sums in a permuted lane order (lanes 2,3 <-> 4,5
    // and 10,11 <-> 12,13), so this width has its own transposing reduction.
    const auto halves = [](__m512 a, __m512 b) {  // 8-lane partials: a in 128-lanes 0-1, b in 2-3
      return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    };
    const auto quarters = [](__m512 a, __m512 b) {  // 4-lane partials: a.first, a.second, b.first, b.second
      return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    };
    __m512 u[4];
    for (int e = 0; e < 4; ++e)  // u[e] holds rows e, e+4, e+8, e+12 in its four 128-bit lanes
      u[e] = quarters(halves(rows[e], rows[e + 4]), halves(rows[e + 8], rows[e + 12]));
    const __m512 v01 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
    const __m512 v23 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(v01, v23, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(v01, v23, _MM_SHUFFLE(3, 2, 3, 2)));
  }
#endif
  return xsimd::haddp(rows);
}
inline float hmax(VecF v) {
  alignas(64) float lanes[kWidth];
  v.store_aligned(lanes);
  float m = lanes[0];
  for (std::size_t i = 1; i < kWidth; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}
/// Lane i holds float(i): used to build index vectors.
inline VecF iota() {
  alignas(64) float lanes[kWidth];
  for (std::size_t i = 0; i < kWidth; ++i) lanes[i] = static_cast<float>(i);
  return VecF::load_aligned(lanes);
}

#else  // scalar fallback: a one-lane "vector"

inline constexpr std::size_t kWidth = 1;
inline constexpr const char* isa_name() { return "scalar"; }

struct VecF {
  float v;
  VecF() = default;
  VecF(float x) : v(x) {}  // NOLINT(google-explicit-constructor): mirrors xsimd's broadcast
  friend VecF operator+(VecF a, VecF b) { return {a.v + b.v}; }
  friend VecF operator-(VecF a, VecF b) { return {a.v - b.v}; }
  friend VecF operator*(VecF a, VecF b) { return {a.v * b.v}; }
  friend VecF operator/(VecF a, VecF b) { return {a.v / b.v}; }
  VecF& operator+=(VecF b) {
    v += b.v;
    return *this;
  }
  VecF& operator*=(VecF b) {
    v *= b.v;
    return *this;
  }
  friend bool operator<(VecF a, VecF b) { return a.v < b.v; }
  friend bool operator<=(VecF a, VecF b) { return a.v <= b.v; }
  friend bool operator>(VecF a, VecF b) { return a.v > b.v; }
  friend bool operator>=(VecF a, VecF b) { return a.v >= b.v; }
  friend bool operator==(VecF a, VecF b) { return a.v == b.v; }
  friend bool operator!=(VecF a, VecF b) { return a.v != b.v; }
};
using MaskF = bool;

inline VecF load(const float* p) { return {*p}; }
inline void store(float* p, VecF v) { *p = v.v; }
inline VecF broadcast(float x) { return {x}; }
inline VecF fma(VecF a, VecF b, VecF c) { return {std::fma(a.v, b.v, c.v)}; }
inline VecF max(VecF a, VecF b) { return {a.v > b.v ? a.v : b.v}; }
inline VecF min(VecF a, VecF b) { return {a.v < b.v ? a.v : b.v}; }
inline VecF exp(VecF v) { return {v.v < kExpLo ? 0.0f : std::exp(v.v)}; }  // 0, not a subnormal, below
inline VecF exp_nonpositive(VecF v) { return exp(v); }
inline VecF tanh(VecF v) { return {std::tanh(v.v)}; }
inline VecF select(MaskF m, VecF a, VecF b) { return m ? a : b; }
inline bool any(MaskF m) { return m; }
inline bool all(MaskF m) { return m; }
inline MaskF both(MaskF a, MaskF b) { return a && b; }
inline MaskF but_not(MaskF a, MaskF b) { return a && !b; }
inline MaskF is_nan(VecF v) { return std::isnan(v.v); }
inline float hsum(VecF v) { return v.v; }
inline VecF haddp(const VecF* rows) { return rows[0]; }
inline float hmax(VecF v) { return v.v; }
inline VecF iota() { return {0.0f}; }

#endif

/// Loads n < kWidth floats (n may be 0); the other lanes hold `fill`. Reads only p[0..n).
inline VecF load_partial(const float* p, std::size_t n, float fill) {
  alignas(64) float lanes[kWidth];
  for (std::size_t i = 0; i < kWidth; ++i) lanes[i] = i < n ? p[i] : fill;
  return load(lanes);
}

/// Stores the first n lanes of v to p[0..n); writes nothing else.
inline void store_partial(float* p, VecF v, std::size_t n) {
  alignas(64) float lanes[kWidth];
  store(lanes, v);
  std::memcpy(p, lanes, n * sizeof(float));
}

// ---- array helpers over float ranges -----------------------------------------------------

/// max(x[0..n)); -inf for n == 0. NaN inputs give an unspecified lane result: callers that
/// must reject NaN check for it explicitly. Four accumulators hide the max/add latency.
inline float max_of(const float* x, std::size_t n) {
  constexpr float kLow = -std::numeric_limits<float>::infinity();
  VecF m0 = broadcast(kLow), m1 = m0, m2 = m0, m3 = m0;
  std::size_t i = 0;
  for (; i + 4 * kWidth <= n; i += 4 * kWidth) {
    m0 = max(m0, load(x + i));
    m1 = max(m1, load(x + i + kWidth));
    m2 = max(m2, load(x + i + 2 * kWidth));
    m3 = max(m3, load(x + i + 3 * kWidth));
  }
  for (; i + kWidth <= n; i += kWidth) m0 = max(m0, load(x + i));
  if (i < n) m1 = max(m1, load_partial(x + i, n - i, kLow));
  return hmax(max(max(m0, m1), max(m2, m3)));
}

/// sum(x[0..n)), accumulated lane-wise in float.
inline float sum_of(const float* x, std::size_t n) {
  VecF s0 = broadcast(0.0f), s1 = s0, s2 = s0, s3 = s0;
  std::size_t i = 0;
  for (; i + 4 * kWidth <= n; i += 4 * kWidth) {
    s0 = s0 + load(x + i);
    s1 = s1 + load(x + i + kWidth);
    s2 = s2 + load(x + i + 2 * kWidth);
    s3 = s3 + load(x + i + 3 * kWidth);
  }
  for (; i + kWidth <= n; i += kWidth) s0 = s0 + load(x + i);
  if (i < n) s1 = s1 + load_partial(x + i, n - i, 0.0f);
  return hsum((s0 + s1) + (s2 + s3));
}

/// dot(a, b) over n floats.
inline float dot(const float* a, const float* b, std::size_t n) {
  VecF s0 = broadcast(0.0f), s1 = s0, s2 = s0, s3 = s0;
  std::size_t i = 0;
  for (; i + 4 * kWidth <= n; i += 4 * kWidth) {
    s0 = fma(load(a + i), load(b + i), s0);
    s1 = fma(load(a + i + kWidth), load(b + i + kWidth), s1);
    s2 = fma(load(a + i + 2 * kWidth), load(b + i + 2 * kWidth), s2);
    s3 = fma(load(a + i + 3 * kWidth), load(b + i + 3 * kWidth), s3);
  }
  for (; i + kWidth <= n; i += kWidth) s0 = fma(load(a + i), load(b + i), s0);
  if (i < n) s1 = fma(load_partial(a + i, n - i, 0.0f), load_partial(b + i, n - i, 0.0f), s1);
  return hsum((s0 + s1) + (s2 + s3));
}

/// sum(x[0..n)) accumulated in double (each float widened exactly), for masses whose
/// comparisons must not depend on float rounding.
inline double sum_as_double(const float* x, std::size_t n) {
  std::size_t i = 0;
  double total = 0.0;
  // INFERKIT_SIMD_XSIMD, not the -march macros alone: under INFERKIT_FORCE_SCALAR immintrin.h is
  // not included and the scalar loop below is the whole sum, whatever -march says.
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  total = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX__)
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8) {
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < n; ++i) total += static_cast<double>(x[i]);
  return total;
}

/// out[i] = exp(x[i] - shift) for i < n; returns the sum of the outputs. x and out may alias.
/// exp(-inf) is 0, so masked entries contribute nothing.
inline float exp_shifted(const float* x, float* out, std::size_t n, float shift) {
  const VecF sh = broadcast(shift);
  VecF s = broadcast(0.0f);
  std::size_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const VecF e = exp(load(x + i) - sh);
    store(out + i, e);
    s = s + e;
  }
  if (i < n) {
    const VecF e = exp(load_partial(x + i, n - i, -std::numeric_limits<float>::infinity()) - sh);
    store_partial(out + i, e, n - i);
    s = s + e;
  }
  return hsum(s);
}

/// x[i] *= a for i < n.
inline void scale(float* x, std::size_t n, float a) {
  const VecF av = broadcast(a);
  std::size_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(x + i, load(x + i) * av);
  if (i < n) store_partial(x + i, load_partial(x + i, n - i, 0.0f) * av, n - i);
}

/// y[i] += a * x[i] for i < n.
inline void axpy(float* y, float a, const float* x, std::size_t n) {
  const VecF av = broadcast(a);
  std::size_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store(y + i, fma(av, load(x + i), load(y + i)));
  if (i < n) store_partial(y + i, fma(av, load_partial(x + i, n - i, 0.0f), load_partial(y + i, n - i, 0.0f)), n - i);
}

}  // namespace inferkit::simd
