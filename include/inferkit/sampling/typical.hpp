#pragma once
// Locally typical sampling (Meier et al. 2022), as Hugging Face's TypicalLogitsWarper: with
// p_i = w_i / Z over the candidates and entropy H = -sum p_i log p_i, order tokens by
// |-log p_i - H| ascending (ties by lowest id) and keep the shortest prefix whose cumulative
// probability reaches `mass`, at least min_keep. mass >= 1 keeps everything. This rule ranks
// every candidate by a score that is not monotone in the logit, so it sorts the candidate set;
// place it after top-k when the vocabulary is large.
// The rule (a chain stage): Typical{0.95f}; alone on a row: apply_typical(logits, 0.95f).

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"

namespace inferkit {

/// Checks typical's parameters (mass in (0, 1], min_keep >= 1); throws std::invalid_argument.
inline void validate_typical(float mass, Index min_keep) {
  require(std::isfinite(mass) && mass > 0.0f && mass <= 1.0f, "typical_p", mass, "must be in (0, 1]");
  require(min_keep >= 1, "min_keep", min_keep, "must be >= 1");
}

inline void apply_typical(Candidates& c, float mass, Index min_keep = 1) {
  validate_typical(mass, min_keep);
  if (mass >= 1.0f) return;
  const float max = c.summary().max;
  std::vector<TokenId> ids;
  c.for_each([&](TokenId id) { ids.push_back(id); });
  std::vector<float> g(ids.size()), w(ids.size());
  for (std::size_t j = 0; j < ids.size(); ++j) g[j] = c.logits()[ids[j]];
  simd::exp_shifted(g.data(), w.data(), g.size(), max);
  const double z = simd::sum_as_double(w.data(), w.size());
  double entropy = 0.0;
  std::vector<double> prob(ids.size()), score(ids.size());
  for (std::size_t j = 0; j < ids.size(); ++j) {
    prob[j] = double(w[j]) / z;
    if (prob[j] > 0.0) entropy -= prob[j] * std::log(prob[j]);
  }
  for (std::size_t j = 0; j < ids.size(); ++j)
    score[j] = prob[j] > 0.0 ? std::abs(-std::log(prob[j]) - entropy) : std::numeric_limits<double>::infinity();
  std::vector<std::size_t> order(ids.size());
  for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return score[a] < score[b] || (score[a] == score[b] && ids[a] < ids[b]);
  });
  double cum = 0.0;
  std::size_t keep = 0;
  while (keep < order.size() && cum < double(mass)) cum += prob[order[keep++]];
  keep = std::max(keep, std::min(order.size(), static_cast<std::size_t>(min_keep)));
  std::vector<TokenId> kept(keep);
  for (std::size_t j = 0; j < keep; ++j) kept[j] = ids[order[j]];
  c.restrict_to(std::move(kept));
}

/// In place on one row; filtered tokens become -inf.
inline void apply_typical(std::span<float> logits, float mass, Index min_keep = 1) {
  Candidates c(logits);
  apply_typical(c, mass, min_keep);
  c.materialize();
}

/// Locally typical stage.
struct Typical {
  float mass = 1.0f;   ///< typical mass in (0, 1]
  Index min_keep = 1;  ///< at least this many stay

  /// The registered name, "typical_p": describe() starts with it.
  static constexpr std::string_view kName = "typical_p";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_typical(mass, min_keep); }
  /// "typical_p(mass)".
  std::string describe() const { return describe_rule(kName, {mass}); }
  /// apply_typical() on the candidates.
  void apply(Candidates& c, const StepInputs&) const { apply_typical(c, mass, min_keep); }
};

}  // namespace inferkit
