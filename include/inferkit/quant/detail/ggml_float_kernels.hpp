#pragma once
// Dot-product tiles over F32 / F16 / BF16 rows (GGUF's plain weight types): R weight rows by C
// activation rows, each output y(t, n) = sum_k w(n, k) x(t, k) accumulated lane-wise in float
// over the vector width, reduced once, then the scalar tail. Every output is computed by the
// same sequence of operations whatever R, C or the thread split, so matvec (C = 1) and matmul
// give the same bits. F16 / BF16 widen in registers where the build can (core/convert.hpp);
// elsewhere rows are decoded into a float scratch first.

#include <cstddef>
#include <vector>

#include "inferkit/core/convert.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

/// Widening of one element of any plain type.
inline float to_float_any(float v) { return v; }
/// Widening of one element of any plain type.
inline float to_float_any(Float16 v) { return to_float(v); }
/// Widening of one element of any plain type.
inline float to_float_any(BFloat16 v) { return to_float(v); }

/// Weight rows per tile and activation rows per tile (AVX2 has 16 vector registers: 4 x 2
/// accumulators plus loads fit; AVX-512's 32 fit 4 x 4).
inline constexpr int kFloatTileRows = 4;
inline constexpr int kFloatTileCols = simd::kWidth >= 16 ? 4 : 2;

/// y[c * y_stride + r] = dot(w_r, x_c) for r < R, c < C over K elements (file comment).
template <class T, int R, int C>
inline void ggml_float_tile(const T* const* w, const float* x, Index x_stride, Index K, float* y, Index y_stride) {
  constexpr auto W = static_cast<Index>(simd::kWidth);
  simd::VecF acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = simd::broadcast(0.0f);
  Index k = 0;
  for (; k + W <= K; k += W) {
    simd::VecF xv[C];
    for (int c = 0; c < C; ++c) xv[c] = simd::load(x + c * x_stride + k);
    for (int r = 0; r < R; ++r) {
      const simd::VecF wv = load_vec(w[r] + k);
      for (int c = 0; c < C; ++c) acc[r][c] = simd::fma(wv, xv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = simd::hsum(acc[r][c]);
      for (Index j = k; j < K; ++j) s += to_float_any(w[r][j]) * x[c * x_stride + j];
      y[c * y_stride + r] = s;
    }
}

}  // namespace inferkit::detail
