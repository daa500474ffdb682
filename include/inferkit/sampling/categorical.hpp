#pragma once
// The final draw: token i of the candidate set with probability w_i / Z (weights as in
// candidates.hpp). The uniform u in [0, 1) is draw `draw_index` of a CounterRng (53 random bits),
// so (seed, stream, draw_index) fixes the token on any thread. Walking candidates in ascending
// id order, the token is the first whose cumulative weight exceeds u * Z. A dense row is walked
// by 1024-token blocks whose masses come from the SIMD weight pass.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"

namespace inferkit {

/// Greedy selection: the lowest id among the largest logits (validates the row).
inline TokenId argmax_token(std::span<const float> logits) { return scan_logits(logits).argmax; }

namespace detail {
/// Index of the first weight whose running sum (from cum) exceeds target; the last positive
/// weight if rounding leaves the target unreached.
inline std::size_t walk_to(const float* w, std::size_t n, double cum, double target) {
  std::size_t last_positive = n;
  for (std::size_t j = 0; j < n; ++j) {
    if (w[j] <= 0.0f) continue;
    last_positive = j;
    cum += static_cast<double>(w[j]);
    if (cum > target) return j;
  }
  return last_positive;
}
}  // namespace detail

/// Draws a token from the candidates. If `distribution` is non-empty (vocabulary size), it
/// receives the normalized probabilities the draw used (zeros outside the set); if
/// `drawn_probability` is given, it receives the drawn token's probability w / Z (double).
inline TokenId sample_categorical(Candidates& c, const CounterRng& rng, std::uint64_t draw_index,
                                  std::span<float> distribution = {}, double* drawn_probability = nullptr) {
  if (!distribution.empty())
    require(static_cast<Index>(distribution.size()) == c.vocab_size(), "distribution.size()", distribution.size(),
            "must equal the vocabulary size (" + std::to_string(c.vocab_size()) + ") or be empty");
  const float max = c.summary().max;
  const double u = rng.uniform_double(draw_index);
  const auto x = c.logits();
  TokenId token = -1;
  if (c.dense()) {
    constexpr std::size_t kBlock = 1024;
    const std::size_t n = x.size(), nb = (n + kBlock - 1) / kBlock;
    AlignedBuffer<float> w(n);
    std::vector<double> block_mass(nb);
    double z = 0.0;
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t lo = b * kBlock, len = std::min(kBlock, n - lo);
      simd::exp_shifted(x.data() + lo, w.data() + lo, len, max);
      block_mass[b] = simd::sum_as_double(w.data() + lo, len);
      z += block_mass[b];
    }
    const double target = u * z;
    double cum = 0.0;
    std::size_t b = 0;
    while (b + 1 < nb && cum + block_mass[b] <= target) cum += block_mass[b++];
    const std::size_t lo = b * kBlock;
    std::size_t j = detail::walk_to(w.data() + lo, std::min(kBlock, n - lo), cum, target);
    if (j == std::min(kBlock, n - lo)) {  // rounding ran past the last block's mass: last positive weight
      for (std::size_t i = n; i-- > 0;)
        if (w[i] > 0.0f) {
          token = static_cast<TokenId>(i);
          break;
        }
    } else {
      token = static_cast<TokenId>(lo + j);
    }
    if (!distribution.empty())
      for (std::size_t i = 0; i < n; ++i) distribution[i] = static_cast<float>(double(w[i]) / z);
    if (drawn_probability) *drawn_probability = double(w[static_cast<std::size_t>(token)]) / z;
  } else {
    const auto& ids = c.ids();
    std::vector<float> g(ids.size()), w(ids.size());
    for (std::size_t j = 0; j < ids.size(); ++j) g[j] = x[static_cast<std::size_t>(ids[j])];
    simd::exp_shifted(g.data(), w.data(), g.size(), max);
    const double z = simd::sum_as_double(w.data(), w.size());
    const std::size_t j = detail::walk_to(w.data(), w.size(), 0.0, u * z);
    token = ids[j];
    if (drawn_probability) *drawn_probability = double(w[j]) / z;
    if (!distribution.empty()) {
      std::fill(distribution.begin(), distribution.end(), 0.0f);
      for (std::size_t j = 0; j < ids.size(); ++j)
        distribution[static_cast<std::size_t>(ids[j])] = static_cast<float>(double(w[j]) / z);
    }
  }
  return token;
}

}  // namespace inferkit
