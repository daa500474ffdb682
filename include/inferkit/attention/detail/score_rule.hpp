#pragma once
// The score rule of every attention kernel (options.hpp states it for users): for query row r
// of head h at position p and a key at position k, from the raw dot product s = q . k,
//   1. scale      s = s * scale (the kernels fold it into the packed query: scaled());
//   2. soft-cap   s = c * tanh(s / c) when c > 0 (Gemma 2);
//   3. ALiBi      s = s - slope_h * (p - k) (Press et al. 2022), when slopes are given;
//   4. mask       s = -inf unless visible: causal k <= p, sliding window p - k < W
//                 (positions: the key's from its block, the query's explicit or bottom-right
//                 aligned, problem.hpp), applied only inside tiles that classify() as partial.
// The prefill and decode kernels keep their scores in different layouts (query rows in SIMD
// lanes; keys x a few rows), so each step has the form each layout needs: on vectors of rows
// (soft_cap, alibi, mask_relative, mask_lanes) and on one score (biased_or_masked). They are
// the only place the rule is written; the fp64 reference (reference.hpp) shares visible() only.
//
//   const ScoreRule rule{.scale = 0.125f, .mask = {true, 4096}, .softcap = 30.0f, .slopes = slopes};
//   const ScoreVectors v = rule.vectors();
//   s = rule.soft_cap(s, v);                   // every score, when rule.capped()
//   if (rule.slopes) s = rule.alibi(s, slope, k_rel - q_rel);
//   if (partial) s = rule.mask_relative(s, k_rel, q_rel, v);
//
// Contract: visible() and classify() compare integer positions exactly at any distance; the
// vector forms take positions relative to one origin as floats, which the caller keeps exact
// (below 2^23 apart), else it takes the per-lane form (mask_lanes with visible()). Each form is
// written exactly as its kernel computed it before the rule was factored out (the vector ALiBi
// bias is one fused multiply-add; the scalar one is left to the compiler), so factoring it out
// changed no bit.

#include <cstdint>

#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

/// How a tile of keys relates to a tile of queries under the mask.
enum class TileVisibility { kNone, kPartial, kAll };

/// The mask: causal and / or a sliding window over positions.
struct MaskRule {
  bool causal = true;
  Index window = 0;

  bool visible(std::int64_t q_pos, std::int64_t k_pos) const {
    if (causal && k_pos > q_pos) return false;
    if (window > 0 && q_pos - k_pos >= window) return false;
    return true;
  }

  /// Classifies keys with positions in [k_min, k_max] against queries in [q_min, q_max].
  TileVisibility classify(std::int64_t q_min, std::int64_t q_max, std::int64_t k_min, std::int64_t k_max) const {
    if (causal && k_min > q_max) return TileVisibility::kNone;
    if (window > 0 && q_min - k_max >= window) return TileVisibility::kNone;
    const bool causal_all = !causal || k_max <= q_min;
    const bool window_all = window <= 0 || q_max - k_min < window;
    return causal_all && window_all ? TileVisibility::kAll : TileVisibility::kPartial;
  }
};

/// The rule's constants broadcast once per kernel unit (ScoreRule::vectors()).
struct ScoreVectors {
  simd::VecF cap, inv_cap, window, neg_inf, zero;
};

/// The score rule (file comment).
struct ScoreRule {
  float scale = 1.0f;             ///< 1 / sqrt(head_dim) unless the options give one
  MaskRule mask{};                ///< causal / sliding window
  float softcap = 0.0f;           ///< c; 0 = off
  const float* slopes = nullptr;  ///< ALiBi slope per query head, or nullptr

  bool capped() const { return softcap > 0.0f; }
  /// A query element as the kernels pack it (step 1).
  float scaled(float q) const { return q * scale; }
  /// Head h's ALiBi slope, 0 without ALiBi.
  float slope(Index h) const { return slopes ? slopes[h] : 0.0f; }

  ScoreVectors vectors() const {
    return {simd::broadcast(softcap), simd::broadcast(capped() ? 1.0f / softcap : 0.0f),
            simd::broadcast(static_cast<float>(mask.window)), simd::broadcast(kNegInf), simd::broadcast(0.0f)};
  }

  /// Step 2 on a vector of scores.
  static simd::VecF soft_cap(simd::VecF s, const ScoreVectors& v) { return v.cap * simd::tanh(s * v.inv_cap); }
  /// Step 3 on a vector: s + slope * (k - p), `k_minus_p` the key's position minus each row's.
  static simd::VecF alibi(simd::VecF s, simd::VecF slope, simd::VecF k_minus_p) {
    return simd::fma(slope, k_minus_p, s);  // -slope * (q_pos - k_pos)
  }
  /// Step 4 on a vector whose lanes are rows at positions q_rel, for one key at k_rel (both
  /// relative to one origin, exact as floats).
  simd::VecF mask_relative(simd::VecF s, simd::VecF k_rel, simd::VecF q_rel, const ScoreVectors& v) const {
    if (mask.causal) s = simd::select(k_rel <= q_rel, s, v.neg_inf);
    if (mask.window > 0) s = simd::select(q_rel - k_rel < v.window, s, v.neg_inf);
    return s;
  }
  /// Step 4 on a vector with each lane's visible() given as 1 (visible) or 0 in `seen`.
  static simd::VecF mask_lanes(simd::VecF s, simd::VecF seen, const ScoreVectors& v) {
    return simd::select(v.zero < seen, s, v.neg_inf);
  }
  /// Steps 3 and 4 on one score of head h (the mask only when `partial`).
  float biased_or_masked(float s, Index h, std::int64_t q_pos, std::int64_t k_pos, bool partial) const {
    if (partial && !mask.visible(q_pos, k_pos)) return kNegInf;
    if (slopes) return s - slopes[h] * static_cast<float>(q_pos - k_pos);
    return s;
  }
};

}  // namespace inferkit::detail
