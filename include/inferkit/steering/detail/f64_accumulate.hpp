#pragma once
// Row kernels of the steering layer whose reductions are accumulated in double.
//
// Every float product below is exact in double (24 + 24 significant bits < 53), so the only
// rounding in a dot product is the double accumulation. Accumulation order, fixed for a build:
// 2W double lanes (W = simd::kWidth floats per vector), element i added to lane i mod 2W in
// index order, then the lanes summed pairwise (lane j += lane j + L/2 while L halves). The order
// depends on W, so results may differ in the last bits of a double between the SSE2, AVX2,
// AVX-512 and scalar builds, never between runs or thread counts of one build.

#include <cmath>
#include <cstddef>

#include "inferkit/core/simd.hpp"

#if !defined(INFERKIT_FORCE_SCALAR) && (defined(__SSE2__) || defined(__AVX__))
#include <immintrin.h>
#endif

namespace inferkit::detail {

// One register path per build, chosen by the widest ISA the compiler may use (the same choice
// xsimd's default_arch makes); each path still checks the vector width at compile time and
// falls back to the generic lanes if it differs.
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
#define INFERKIT_STEERING_F64_AVX512 1
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__AVX__)
#define INFERKIT_STEERING_F64_AVX 1
#elif defined(INFERKIT_SIMD_XSIMD) && defined(__SSE2__)
#define INFERKIT_STEERING_F64_SSE2 1
#endif

/// 2W double accumulators fed with products of float vectors (see the order above).
class F64Lanes {
 public:
  static constexpr std::size_t kLanes = 2 * simd::kWidth;

  /// Adds x[k] * y[k] to lane `half * W + k` for k < W (half is 0 or 1).
  template <class V>  // a template, so the register paths of other widths are never instantiated
  void add_products(V x, V y, int half) {
#if defined(INFERKIT_STEERING_F64_AVX512)
    if constexpr (V::size == 16) {
      const __m512 xv = x, yv = y;
      __m512d& lo = r_[2 * half];
      __m512d& hi = r_[2 * half + 1];
      lo =
          _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(xv)), _mm512_cvtps_pd(_mm512_castps512_ps256(yv)), lo);
      hi = _mm512_fmadd_pd(_mm512_cvtps_pd(upper256(xv)), _mm512_cvtps_pd(upper256(yv)), hi);
      return;
    }
#elif defined(INFERKIT_STEERING_F64_AVX)
    if constexpr (V::size == 8) {  // products are exact in double, so mul + add is as exact as fma
      const __m256 xv = x, yv = y;
      __m256d& lo = r_[2 * half];
      __m256d& hi = r_[2 * half + 1];
      lo = _mm256_add_pd(
          lo, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(xv)), _mm256_cvtps_pd(_mm256_castps256_ps128(yv))));
      hi = _mm256_add_pd(hi, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)),
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(yv, 1))));
      return;
    }
#elif defined(INFERKIT_STEERING_F64_SSE2)
    if constexpr (V::size == 4) {
      const __m128 xv = x, yv = y;
      __m128d& lo = r_[2 * half];
      __m128d& hi = r_[2 * half + 1];
      lo = _mm_add_pd(lo, _mm_mul_pd(_mm_cvtps_pd(xv), _mm_cvtps_pd(yv)));
      hi = _mm_add_pd(hi, _mm_mul_pd(_mm_cvtps_pd(_mm_movehl_ps(xv, xv)), _mm_cvtps_pd(_mm_movehl_ps(yv, yv))));
      return;
    }
#endif
    // The scalar build, or a width without a register path.
    alignas(64) float xs[simd::kWidth], ys[simd::kWidth];
    simd::store(xs, x);
    simd::store(ys, y);
    for (std::size_t k = 0; k < simd::kWidth; ++k)
      lanes_[static_cast<std::size_t>(half) * simd::kWidth + k] +=
          static_cast<double>(xs[k]) * static_cast<double>(ys[k]);
  }

  /// The lanes summed pairwise.
  double total() const {
    alignas(64) double l[kLanes];
    for (std::size_t k = 0; k < kLanes; ++k) l[k] = lanes_[k];
#if defined(INFERKIT_STEERING_F64_AVX512)
    if constexpr (simd::kWidth == 16)
      for (int r = 0; r < 4; ++r) _mm512_store_pd(l + 8 * r, r_[r]);
#elif defined(INFERKIT_STEERING_F64_AVX)
    if constexpr (simd::kWidth == 8)
      for (int r = 0; r < 4; ++r) _mm256_store_pd(l + 4 * r, r_[r]);
#elif defined(INFERKIT_STEERING_F64_SSE2)
    if constexpr (simd::kWidth == 4)
      for (int r = 0; r < 4; ++r) _mm_store_pd(l + 2 * r, r_[r]);
#endif
    for (std::size_t n = kLanes; n > 1; n /= 2)
      for (std::size_t j = 0; j < n / 2; ++j) l[j] += l[j + n / 2];
    return l[0];
  }

 private:
#if defined(INFERKIT_STEERING_F64_AVX512)
  static __m256 upper256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
  __m512d r_[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
#elif defined(INFERKIT_STEERING_F64_AVX)
  __m256d r_[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
#elif defined(INFERKIT_STEERING_F64_SSE2)
  __m128d r_[4] = {_mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd()};
#endif
  double lanes_[kLanes] = {};
};

/// Calls f(x, half) for every float vector of [0, n) in order, half = (i / W) mod 2; the last
/// vectors are partial loads filled with `fill` (f must treat those lanes as padding).
template <class F>
inline void for_each_vector(std::size_t n, F&& f) {
  constexpr std::size_t W = simd::kWidth;
  std::size_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    f(i, W, 0);
    f(i + W, W, 1);
  }
  for (int half = 0; i < n; i += W, ++half) f(i, n - i < W ? n - i : W, half);
}

/// sum a[i] * b[i] over [0, n), products exact, accumulated in double (order: file comment).
inline double dot_f64(const float* a, const float* b, std::size_t n) {
  F64Lanes acc;
  for_each_vector(n, [&](std::size_t i, std::size_t m, int half) {
    if (m == simd::kWidth)
      acc.add_products(simd::load(a + i), simd::load(b + i), half);
    else
      acc.add_products(simd::load_partial(a + i, m, 0.0f), simd::load_partial(b + i, m, 0.0f), half);
  });
  return acc.total();
}

/// sum a[i]^2 over [0, n) in double (order: file comment).
inline double squared_norm_f64(const float* a, std::size_t n) {
  F64Lanes acc;
  for_each_vector(n, [&](std::size_t i, std::size_t m, int half) {
    const simd::VecF x = m == simd::kWidth ? simd::load(a + i) : simd::load_partial(a + i, m, 0.0f);
    acc.add_products(x, x, half);
  });
  return acc.total();
}

/// Squared norms of h before and after `h[i] = fma(a, v[i], h[i])`, from one pass.
struct NormsBeforeAfter {
  double before = 0.0;
  double after = 0.0;
};

/// h[i] = a * v[i] + h[i] (simd::fma: one rounding where the ISA has FMA) for i < n, returning
/// the squared norms of h before and after, each accumulated in double.
inline NormsBeforeAfter axpy_with_norms(float* h, float a, const float* v, std::size_t n) {
  F64Lanes before, after;
  const simd::VecF av = simd::broadcast(a);
  for_each_vector(n, [&](std::size_t i, std::size_t m, int half) {
    if (m == simd::kWidth) {
      const simd::VecF x = simd::load(h + i);
      const simd::VecF y = simd::fma(av, simd::load(v + i), x);
      simd::store(h + i, y);
      before.add_products(x, x, half);
      after.add_products(y, y, half);
    } else {
      const simd::VecF x = simd::load_partial(h + i, m, 0.0f);
      const simd::VecF y = simd::fma(av, simd::load_partial(v + i, m, 0.0f), x);
      simd::store_partial(h + i, y, m);
      before.add_products(x, x, half);
      after.add_products(y, y, half);
    }
  });
  return {before.total(), after.total()};
}

/// Rescales h (squared norm `after`) to the norm sqrt(`before`): h *= float(sqrt(before /
/// after)). A zero h (after == 0) stays zero: it has no direction to rescale along.
inline void restore_norm(float* h, std::size_t n, NormsBeforeAfter norms) {
  if (norms.after == 0.0 || norms.before == norms.after) return;
  simd::scale(h, n, static_cast<float>(std::sqrt(norms.before / norms.after)));
}

}  // namespace inferkit::detail
