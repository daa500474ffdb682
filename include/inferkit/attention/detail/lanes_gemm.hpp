#pragma once
// The prefill kernel's matrix product with query rows in SIMD lanes:
//   C[i][r] = (c_scale ? C[i][r] * c_scale[r] : 0) + sum_j A[i * a_rs + j * a_cs] * B[j * b_rs + r]
// for i < I, r < R (R a multiple of the vector width). Both products of FlashAttention-2 take this form
// once the query tile is transposed: S^T = K Q^T (A = K rows) and O^T = O^T diag(alpha) + V^T P^T
// (A = V read transposed). A's elements are broadcast, B and C rows are whole vectors: no
// horizontal reductions, and the softmax statistics of each query row live in a lane.

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

struct LanesGemmShape {
  // Micro-tile: kMR rows of A times kNV vectors of query rows; accumulators kMR * kNV registers.
  // AVX2 (16 ymm registers): 6 x 2 = 12 accumulators + 2 B vectors + 1 broadcast, the classic
  // AVX2 SGEMM shape; 12 independent FMA chains cover the FMA latency (4 to 5 cycles) times two
  // ports, where 4 x 2 = 8 chains capped the loop at 8 / 10 of the FMA peak on 5-cycle FMAs
  // (Zen 2), and 12 FMAs per 8 loads instead of 8 per 6.
  static constexpr int kNV = simd::kWidth >= 16 ? 4 : (simd::kWidth > 1 ? 2 : 4);
  static constexpr int kMR = simd::kWidth >= 8 ? 6 : 4;
  static constexpr Index kRowBlock = kNV * static_cast<Index>(simd::kWidth);
  /// Rows of A per micro-tile for a panel of nv < kNV vectors: more rows, same register count.
  static constexpr int rows_for(int nv) { return std::min(12, kMR * kNV / nv); }
};

template <int MR, int NV>
inline void lanes_gemm_micro(const float* a, Index a_rs, Index a_cs, Index J, const float* b, Index b_rs, float* c,
                             Index c_rs, const float* c_scale) {
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

template <int MR, int NV>
inline void lanes_gemm_row_tail(Index rows, const float* a, Index a_rs, Index a_cs, Index J, const float* b, Index b_rs,
                                float* c, Index c_rs, const float* c_scale) {
  if constexpr (MR > 0) {
    if (rows == MR) {
      lanes_gemm_micro<MR, NV>(a, a_rs, a_cs, J, b, b_rs, c, c_rs, c_scale);
      return;
    }
    lanes_gemm_row_tail<MR - 1, NV>(rows, a, a_rs, a_cs, J, b, b_rs, c, c_rs, c_scale);
  }
}

// One panel of NV vectors of query rows, all I rows of A.
template <int NV>
inline void lanes_gemm_panel(Index I, Index J, const float* a, Index a_rs, Index a_cs, const float* b, Index b_rs,
                             float* c, Index c_rs, const float* c_scale) {
  constexpr int MR = NV == LanesGemmShape::kNV ? LanesGemmShape::kMR : LanesGemmShape::rows_for(NV);
  Index i = 0;
  for (; i + MR <= I; i += MR)
    lanes_gemm_micro<MR, NV>(a + i * a_rs, a_rs, a_cs, J, b, b_rs, c + i * c_rs, c_rs, c_scale);
  if (i < I) lanes_gemm_row_tail<MR - 1, NV>(I - i, a + i * a_rs, a_rs, a_cs, J, b, b_rs, c + i * c_rs, c_rs, c_scale);
}

/// See the file comment. R must be a multiple of simd::kWidth. Every element's arithmetic is
/// the same whatever R and whatever lane holds it (a chain of FMAs over j in order, from
/// C * c_scale or from zero), so a query row's bits do not depend on its tile mates.
inline void lanes_gemm(Index I, Index J, Index R, const float* a, Index a_rs, Index a_cs, const float* b, Index b_rs,
                       float* c, Index c_rs, const float* c_scale) {
  constexpr Index W = static_cast<Index>(simd::kWidth);
  Index r0 = 0;
  const auto panel = [&]<int NV>(std::integral_constant<int, NV>) {
    lanes_gemm_panel<NV>(I, J, a, a_rs, a_cs, b + r0, b_rs, c + r0, c_rs, c_scale ? c_scale + r0 : nullptr);
    r0 += NV * W;
  };
  while (R - r0 >= LanesGemmShape::kRowBlock) panel(std::integral_constant<int, LanesGemmShape::kNV>{});
  const Index rest = (R - r0) / W;
  if constexpr (LanesGemmShape::kNV > 3)
    if (rest == 3) panel(std::integral_constant<int, 3>{});
  if constexpr (LanesGemmShape::kNV > 2)
    if (rest == 2) panel(std::integral_constant<int, 2>{});
  if constexpr (LanesGemmShape::kNV > 1)
    if (rest == 1) panel(std::integral_constant<int, 1>{});
}

}  // namespace inferkit::detail
