#pragma once
// Logits validation and the small helpers every decoding rule shares.
//
// The one documented behaviour for non-finite logits: -inf means "filtered" and is allowed
// anywhere; NaN and +inf are errors (std::invalid_argument naming the first bad index); a row
// that is empty or entirely -inf is an error too.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

using TokenId = std::int32_t;

struct LogitsSummary {
  float max = -std::numeric_limits<float>::infinity();
  TokenId argmax = -1;  // lowest id holding the maximum
};

namespace detail {
[[noreturn]] inline void throw_bad_logit(std::span<const float> logits, std::string_view name) {
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
      throw_invalid_argument(std::string(name) + "[" + std::to_string(i) + "]", x,
                             "logits must be finite or -inf (filtered)");
  }
  throw_invalid_argument(std::string(name) + ".size()", logits.size(), "no logit is finite (all are -inf)");
}
}  // namespace detail

/// Validates a row of logits and returns its maximum and argmax (lowest id among ties) in one
/// SIMD pass. Throws std::invalid_argument for an empty row, NaN, +inf or all -inf.
inline LogitsSummary scan_logits(std::span<const float> logits, std::string_view name = "logits") {
  require(!logits.empty(), std::string(name) + ".size()", logits.size(), "must be > 0 (empty vocabulary)");
  using simd::VecF;
  constexpr std::size_t W = simd::kWidth;
  const float* x = logits.data();
  const std::size_t n = logits.size();
  const VecF neg_inf = simd::broadcast(-std::numeric_limits<float>::infinity());
  const VecF pos_inf = simd::broadcast(std::numeric_limits<float>::infinity());
  VecF best = neg_inf, best_idx = simd::broadcast(0.0f), idx = simd::iota();
  const VecF step = simd::broadcast(static_cast<float>(W));
  VecF bad = simd::broadcast(0.0f);  // counts NaN / +inf lanes
  std::size_t i = 0;
  for (; i + W <= n; i += W) {
    const VecF v = simd::load(x + i);
    bad = bad + simd::select(simd::is_nan(v), VecF(1.0f), simd::select(v == pos_inf, VecF(1.0f), VecF(0.0f)));
    const auto gt = v > best;  // strict: the first (lowest) index wins within a lane
    best = simd::select(gt, v, best);
    best_idx = simd::select(gt, idx, best_idx);
    idx = idx + step;
  }
  if (i < n) {
    const VecF v = simd::load_partial(x + i, n - i, -std::numeric_limits<float>::infinity());
    bad = bad + simd::select(simd::is_nan(v), VecF(1.0f), simd::select(v == pos_inf, VecF(1.0f), VecF(0.0f)));
    const auto gt = v > best;
    best = simd::select(gt, v, best);
    best_idx = simd::select(gt, idx, best_idx);
  }
  if (simd::hsum(bad) > 0.0f) detail::throw_bad_logit(logits, name);
  alignas(64) float bv[W], bi[W];
  simd::store(bv, best);
  simd::store(bi, best_idx);
  LogitsSummary s;
  for (std::size_t l = 0; l < W; ++l) {
    const auto id = static_cast<TokenId>(bi[l]);
    if (bv[l] > s.max || (bv[l] == s.max && bv[l] > -std::numeric_limits<float>::infinity() && id < s.argmax)) {
      s.max = bv[l];
      s.argmax = id;
    }
  }
  if (s.argmax < 0) detail::throw_bad_logit(logits, name);
  return s;
}

}  // namespace inferkit
