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

/// Validates a row of logits and returns its maximum and argmax (lowest id among ties).
/// Throws std::invalid_argument for an empty row, NaN, +inf or all -inf. One SIMD pass finds
/// the max with four independent accumulators (a single max chain is latency-bound) while a
/// mask collects "finite or -inf" (x < +inf is false exactly for NaN and +inf); then a search
/// that stops at the first lane equal to the max gives the argmax.
inline LogitsSummary scan_logits(std::span<const float> logits, std::string_view name = "logits") {
  require(!logits.empty(), std::string(name) + ".size()", logits.size(), "must be > 0 (empty vocabulary)");
  using simd::VecF;
  constexpr std::size_t W = simd::kWidth;
  const float* x = logits.data();
  const std::size_t n = logits.size();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const VecF neg_inf = simd::broadcast(kNegInf), pos_inf = simd::broadcast(std::numeric_limits<float>::infinity());
  VecF m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  auto ok = pos_inf > neg_inf;  // all lanes true
  std::size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    const VecF a = simd::load(x + i), b = simd::load(x + i + W), c = simd::load(x + i + 2 * W),
               d = simd::load(x + i + 3 * W);
    ok = simd::both(ok, simd::both(simd::both(a < pos_inf, b < pos_inf), simd::both(c < pos_inf, d < pos_inf)));
    m0 = simd::max(m0, a);
    m1 = simd::max(m1, b);
    m2 = simd::max(m2, c);
    m3 = simd::max(m3, d);
  }
  for (; i < n; i += W) {
    const VecF v = i + W <= n ? simd::load(x + i) : simd::load_partial(x + i, n - i, kNegInf);
    ok = simd::both(ok, v < pos_inf);
    m0 = simd::max(m0, v);
  }
  if (!simd::all(ok)) detail::throw_bad_logit(logits, name);
  LogitsSummary s;
  s.max = simd::hmax(simd::max(simd::max(m0, m1), simd::max(m2, m3)));
  if (!(s.max > kNegInf)) detail::throw_bad_logit(logits, name);
  const VecF mv = simd::broadcast(s.max);
  std::size_t j = 0;
  while (j + W <= n && !simd::any(simd::load(x + j) == mv)) j += W;
  while (x[j] != s.max) ++j;
  s.argmax = static_cast<TokenId>(j);
  return s;
}

}  // namespace inferkit
