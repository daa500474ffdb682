#pragma once
// The prefill kernel's matrix product with query rows in SIMD lanes:
//   C[i][r] = (c_scale ? C[i][r] * c_scale[r] : 0) + sum_j A[i * a_rs + j * a_cs] * B[j * b_rs + r]
// for i < I, r < R (R a multiple of kRowBlock). Both products of FlashAttention-2 take this form
// once the query tile is transposed: S^T = K Q^T (A = K rows) and O^T = O^T diag(alpha) + V^T P^T
// (A = V read transposed). A's elements are broadcast, B and C rows are whole vectors: no
// horizontal reductions, and the softmax statistics of each query row live in a lane.

#include <cstddef>

#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

struct LanesGemmShape {
  // Micro-tile: kMR rows of A times kNV vectors of query rows; accumulators kMR * kNV registers.
  static constexpr int kNV = simd::kWidth >= 16 ? 4 : (simd::kWidth > 1 ? 2 : 4);
  static constexpr int kMR = simd::kWidth >= 16 ? 6 : 4;
  static constexpr Index kRowBlock = kNV * static_cast<Index>(simd::kWidth);
};

template <int MR, int NV>
inline void lanes_gemm_micro(const float* a, Index a_rs, Index a_cs, Index J, const float* b, Index b_rs,
                             float* c, Index c_rs, const float* c_scale) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  VecF acc[MR][NV];
  if (c_scale) {
    VecF sc[NV];
    for (int v = 0; v < NV; ++v) sc[v] = simd::load(c_scale + v * W);
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = simd::load(c + i * c_rs + v * W) * sc[v];
  } else {
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = simd::broadcast(0.0f);
  }
  for (Index j = 0; j < J; ++j) {
    VecF bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = simd::load(b + j * b_rs + v * W);
    const float* aj = a + j * a_cs;
    for (int i = 0; i < MR; ++i) {
      const VecF ai = simd::broadcast(aj[i * a_rs]);
      for (int v = 0; v < NV; ++v) acc[i][v] = simd::fma(ai, bv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) simd::store(c + i * c_rs + v * W, acc[i][v]);
}

template <int MR>
inline void lanes_gemm_row_tail(Index rows, const float* a, Index a_rs, Index a_cs, Index J, const float* b,
                                Index b_rs, float* c, Index c_rs, const float* c_scale) {
  constexpr int NV = LanesGemmShape::kNV;
  if constexpr (MR > 0) {
    if (rows == MR) {
      lanes_gemm_micro<MR, NV>(a, a_rs, a_cs, J, b, b_rs, c, c_rs, c_scale);
      return;
    }
    lanes_gemm_row_tail<MR - 1>(rows, a, a_rs, a_cs, J, b, b_rs, c, c_rs, c_scale);
  }
}

/// See the file comment. R must be a multiple of LanesGemmShape::kRowBlock.
inline void lanes_gemm(Index I, Index J, Index R, const float* a, Index a_rs, Index a_cs, const float* b, Index b_rs,
                       float* c, Index c_rs, const float* c_scale) {
  constexpr int MR = LanesGemmShape::kMR, NV = LanesGemmShape::kNV;
  for (Index r0 = 0; r0 < R; r0 += LanesGemmShape::kRowBlock) {
    const float* sc = c_scale ? c_scale + r0 : nullptr;
    Index i = 0;
    for (; i + MR <= I; i += MR)
      lanes_gemm_micro<MR, NV>(a + i * a_rs, a_rs, a_cs, J, b + r0, b_rs, c + i * c_rs + r0, c_rs, sc);
    if (i < I)
      lanes_gemm_row_tail<MR - 1>(I - i, a + i * a_rs, a_rs, a_cs, J, b + r0, b_rs, c + i * c_rs + r0, c_rs, sc);
  }
}

}  // namespace inferkit::detail
