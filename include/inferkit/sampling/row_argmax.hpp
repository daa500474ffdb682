#pragma once
// The validated argmax of one row of logits or probabilities at memory speed: the greedy rule's
// only full-row read (tree_verify.hpp's verify_tree_greedy reads one row per accepted draft plus
// one). Same result and errors as scan_logits (logits.hpp): the largest value, the lowest id
// among equal ones; NaN or +inf anywhere, an empty row or a row of -inf only is an error naming
// the first bad index.
//
//   const inferkit::LogitsSummary s = inferkit::row_argmax(logits);  // s.argmax, s.max
//
// A row is read once, in blocks of 1,024 values: four independent max chains per block (one
// chain waits on its own latency), then per lane the first block where that lane's maximum rose
// (a compare and two masked moves per block, not a horizontal max per block). The overall max is
// the largest lane; the first block holding it is the smallest block id among the lanes equal to
// it, and the argmax is searched in that block only. NaN detection costs no mask per vector:
// AVX-512's vfixupimmps maps NaN to +inf in the value fed to the max (+inf is an error anyway, so
// a max of +inf means "scan for the first bad index"); AVX2 compares pairs of vectors unordered
// (true when either holds a NaN) into a vector OR. bench/speculative_bench.cpp compares it with
// scan_logits (speculative_argmax) and the greedy tree walk before it (speculative_tree case 6).
//
// Paths (chosen at compile time, each testable on its own): AVX-512F, AVX2, and a scalar loop.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/token.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// Which path row_argmax runs.
enum class RowArgmaxPath {
  kAuto,    ///< the widest this build has
  kScalar,  ///< one value at a time (always available)
  kAvx2,    ///< 8 lanes (builds with AVX2 and xsimd)
  kAvx512,  ///< 16 lanes (builds with AVX-512F and xsimd)
};

/// Whether this build has path `p`.
constexpr bool has_row_argmax_path(RowArgmaxPath p) {
  switch (p) {
    case RowArgmaxPath::kAuto:
    case RowArgmaxPath::kScalar:
      return true;
    case RowArgmaxPath::kAvx2:
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
      return true;
#else
      return false;
#endif
    case RowArgmaxPath::kAvx512:
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
      return true;
#else
      return false;
#endif
  }
  return false;
}

namespace detail {

inline constexpr std::size_t kArgmaxBlock = 1024;

/// The lowest index in [from, n) holding `value` (present there by construction).
inline std::size_t first_equal(const float* x, std::size_t from, float value) {
  std::size_t j = from;
  while (x[j] != value) ++j;
  return j;
}

/// Maximum over the lanes (vals) and the smallest block id among the lanes holding it.
inline void reduce_lanes(const float* vals, const std::int32_t* blocks, std::size_t lanes, float& best,
                         std::int32_t& block) {
  best = -std::numeric_limits<float>::infinity();
  block = -1;
  for (std::size_t l = 0; l < lanes; ++l)
    if (vals[l] > best || (vals[l] == best && blocks[l] < block)) {
      best = vals[l];
      block = blocks[l];
    }
}

inline LogitsSummary row_argmax_scalar(const float* x, std::size_t n) {
  constexpr float kPosInf = std::numeric_limits<float>::infinity();
  float best = -kPosInf;
  std::size_t at = 0;
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    ok = ok && x[i] < kPosInf;  // false for NaN and +inf
    if (x[i] > best) {          // strict: the lowest id wins ties
      best = x[i];
      at = i;
    }
  }
  if (!ok || !(best > -kPosInf)) return {kPosInf, -1};
  return {best, static_cast<TokenId>(at)};
}

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
inline LogitsSummary row_argmax_avx512(const float* x, std::size_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  // vfixupimmps table: token 0 (QNaN) and 1 (SNaN) -> response 5 (+inf), every other class ->
  // response 0 (the value itself).
  const __m512i nan_to_inf = _mm512_set1_epi32(0x55);
  __m512 best = neg_inf;
  __m512i best_block = _mm512_setzero_si512();
  std::int32_t b = 0;
  for (std::size_t b0 = 0; b0 < n; b0 += kArgmaxBlock, ++b) {
    const std::size_t end = std::min(n, b0 + kArgmaxBlock);
    __m512 m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
    std::size_t i = b0;
    for (; i + 64 <= end; i += 64) {
      const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16), v2 = _mm512_loadu_ps(x + i + 32),
                   v3 = _mm512_loadu_ps(x + i + 48);
      m0 = _mm512_max_ps(m0, _mm512_fixupimm_ps(v0, v0, nan_to_inf, 0));
      m1 = _mm512_max_ps(m1, _mm512_fixupimm_ps(v1, v1, nan_to_inf, 0));
      m2 = _mm512_max_ps(m2, _mm512_fixupimm_ps(v2, v2, nan_to_inf, 0));
      m3 = _mm512_max_ps(m3, _mm512_fixupimm_ps(v3, v3, nan_to_inf, 0));
    }
    for (; i < end; i += 16) {  // the row's tail: lanes past the end read as -inf
      const auto k = static_cast<__mmask16>(end - i >= 16 ? 0xFFFF : (1u << (end - i)) - 1u);
      const __m512 v = _mm512_mask_loadu_ps(neg_inf, k, x + i);
      m0 = _mm512_max_ps(m0, _mm512_fixupimm_ps(v, v, nan_to_inf, 0));
    }
    const __m512 m = _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3));
    const __mmask16 rose = _mm512_cmp_ps_mask(m, best, _CMP_GT_OQ);  // strict: a lane keeps its first block
    best = _mm512_mask_mov_ps(best, rose, m);
    best_block = _mm512_mask_mov_epi32(best_block, rose, _mm512_set1_epi32(b));
  }
  alignas(64) float vals[16];
  alignas(64) std::int32_t blocks[16];
  _mm512_store_ps(vals, best);
  _mm512_store_si512(blocks, best_block);
  float top;
  std::int32_t block;
  reduce_lanes(vals, blocks, 16, top, block);
  if (!(top > -std::numeric_limits<float>::infinity()) || top == std::numeric_limits<float>::infinity())
    return {std::numeric_limits<float>::infinity(), -1};
  const std::size_t lo = static_cast<std::size_t>(block) * kArgmaxBlock, hi = std::min(n, lo + kArgmaxBlock);
  const __m512 t = _mm512_set1_ps(top);
  for (std::size_t i = lo; i + 16 <= hi; i += 16)
    if (const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), t, _CMP_EQ_OQ))
      return {top, static_cast<TokenId>(i + static_cast<std::size_t>(__builtin_ctz(eq)))};
  return {top, static_cast<TokenId>(first_equal(x, lo + (hi - lo) / 16 * 16, top))};
}
#endif

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
inline LogitsSummary row_argmax_avx2(const float* x, std::size_t n) {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 best = neg_inf, bad = _mm256_setzero_ps();
  __m256i best_block = _mm256_setzero_si256();
  std::int32_t b = 0;
  bool tail_bad = false;
  for (std::size_t b0 = 0; b0 < n; b0 += kArgmaxBlock, ++b) {
    const std::size_t end = std::min(n, b0 + kArgmaxBlock);
    __m256 m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
    std::size_t i = b0;
    for (; i + 32 <= end; i += 32) {
      const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8), v2 = _mm256_loadu_ps(x + i + 16),
                   v3 = _mm256_loadu_ps(x + i + 24);
      // Unordered is true when either operand is NaN: one compare checks two vectors.
      bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q), _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));
      m0 = _mm256_max_ps(m0, v0);
      m1 = _mm256_max_ps(m1, v1);
      m2 = _mm256_max_ps(m2, v2);
      m3 = _mm256_max_ps(m3, v3);
    }
    for (; i + 8 <= end; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m0 = _mm256_max_ps(m0, v);
    }
    float tail = -std::numeric_limits<float>::infinity();  // the row's last n % 8 values
    for (; i < end; ++i) {
      tail_bad = tail_bad || !(x[i] < std::numeric_limits<float>::infinity());
      if (x[i] > tail) tail = x[i];
    }
    const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)), _mm256_set1_ps(tail));
    const __m256 rose = _mm256_cmp_ps(m, best, _CMP_GT_OQ);  // strict: a lane keeps its first block
    best = _mm256_blendv_ps(best, m, rose);
    best_block = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(best_block), _mm256_castsi256_ps(_mm256_set1_epi32(b)), rose));
  }
  alignas(32) float vals[8];
  alignas(32) std::int32_t blocks[8];
  _mm256_store_ps(vals, best);
  _mm256_store_si256(reinterpret_cast<__m256i*>(blocks), best_block);
  float top;
  std::int32_t block;
  reduce_lanes(vals, blocks, 8, top, block);
  if (tail_bad || _mm256_movemask_ps(bad) != 0 || !(top > -std::numeric_limits<float>::infinity()) ||
      top == std::numeric_limits<float>::infinity())
    return {std::numeric_limits<float>::infinity(), -1};
  const std::size_t lo = static_cast<std::size_t>(block) * kArgmaxBlock, hi = std::min(n, lo + kArgmaxBlock);
  const __m256 t = _mm256_set1_ps(top);
  for (std::size_t i = lo; i + 8 <= hi; i += 8)
    if (const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), t, _CMP_EQ_OQ)))
      return {top, static_cast<TokenId>(i + static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(eq))))};
  return {top, static_cast<TokenId>(first_equal(x, lo + (hi - lo) / 8 * 8, top))};
}
#endif

}  // namespace detail

/// The largest value of the row and the lowest id holding it (the file comment), on path `path`.
/// @throws std::invalid_argument for an empty row, NaN or +inf (naming name[i], the first), a row
///         of -inf only, or a path this build lacks.
inline LogitsSummary row_argmax(std::span<const float> row, RowArgmaxPath path = RowArgmaxPath::kAuto,
                                std::string_view name = "logits") {
  require(!row.empty(), std::string(name) + ".size()", row.size(), "must be > 0 (empty vocabulary)");
  require(has_row_argmax_path(path), "row_argmax path", static_cast<int>(path), "is not in this build");
  LogitsSummary s;
  [&] {
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX512F__)
    if (path == RowArgmaxPath::kAuto || path == RowArgmaxPath::kAvx512) {
      s = detail::row_argmax_avx512(row.data(), row.size());
      return;
    }
#endif
#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__)
    if (path == RowArgmaxPath::kAuto || path == RowArgmaxPath::kAvx2) {
      s = detail::row_argmax_avx2(row.data(), row.size());
      return;
    }
#endif
    s = detail::row_argmax_scalar(row.data(), row.size());
  }();
  if (s.argmax < 0) detail::throw_bad_logit(row, name);  // names the first NaN / +inf, or "all -inf"
  return s;
}

}  // namespace inferkit
