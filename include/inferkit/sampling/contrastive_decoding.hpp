#pragma once
// Contrastive decoding (Li et al. 2023, "Contrastive Decoding: Open-ended Text Generation as
// Optimization"): with an expert and an amateur model's logits over the same vocabulary,
//   plausible set V_head = { v : p_expert(v) >= alpha * max_w p_expert(w) }   (alpha default 0.1)
//   score(v) = log p_expert(v) - log p_amateur(v) on V_head, -inf elsewhere.
// Greedy (temperature 0, the paper's setting) picks the best score, ties to the lowest id;
// temperature T > 0 samples from softmax(score / T) with a CounterRng draw. Log-probabilities use
// log-sum-exp in double.

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/philox.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/logits.hpp"

namespace inferkit {

/// Expert / amateur contrastive decoding parameters (Li et al. 2023).
struct ContrastiveDecodingOptions {
  float alpha = 0.1f;        ///< plausibility cut, relative to the expert's best probability
  float temperature = 0.0f;  ///< 0 = greedy
};

namespace detail {
inline double log_sum_exp(std::span<const float> x, float max) {
  double s = 0.0;
  for (float v : x)
    if (v > -std::numeric_limits<float>::infinity()) s += std::exp(double(v) - double(max));
  return double(max) + std::log(s);
}
}  // namespace detail

/// Contrastive scores over the vocabulary (-inf outside the plausible set).
inline std::vector<float> contrastive_decoding_scores(std::span<const float> expert, std::span<const float> amateur,
                                                      float alpha) {
  require(amateur.size() == expert.size(), "amateur.size()", amateur.size(),
          "must equal expert.size() (" + std::to_string(expert.size()) + ")");
  require(std::isfinite(alpha) && alpha > 0.0f && alpha <= 1.0f, "alpha", alpha, "must be in (0, 1]");
  const LogitsSummary e = scan_logits(expert, "expert");
  const LogitsSummary a = scan_logits(amateur, "amateur");
  const double lse_e = detail::log_sum_exp(expert, e.max), lse_a = detail::log_sum_exp(amateur, a.max);
  // p_e(v) >= alpha * max p_e  <=>  l_v - max_l >= log(alpha)
  const double cut = std::log(double(alpha));
  std::vector<float> score(expert.size(), -std::numeric_limits<float>::infinity());
  for (std::size_t v = 0; v < expert.size(); ++v) {
    if (!(double(expert[v]) - double(e.max) >= cut)) continue;
    const double lp_e = double(expert[v]) - lse_e, lp_a = double(amateur[v]) - lse_a;
    score[v] = static_cast<float>(lp_e - lp_a);  // +inf if the amateur gives v no probability
  }
  return score;
}

/// The token contrastive decoding chooses: greedy for temperature 0, else a draw from
/// softmax(score / temperature) with draw `draw_index` of `rng`.
inline TokenId contrastive_decode(std::span<const float> expert, std::span<const float> amateur,
                                  const ContrastiveDecodingOptions& opt = {}, const CounterRng& rng = CounterRng(0),
                                  std::uint64_t draw_index = 0) {
  require(std::isfinite(opt.temperature) && opt.temperature >= 0.0f, "temperature", opt.temperature,
          "must be finite and >= 0 (0 = greedy)");
  std::vector<float> s = contrastive_decoding_scores(expert, amateur, opt.alpha);
  // An amateur probability of 0 makes the score +inf: such tokens win outright (ties by id).
  bool has_inf = false;
  for (float v : s) has_inf = has_inf || v == std::numeric_limits<float>::infinity();
  if (has_inf)
    for (float& v : s) v = v == std::numeric_limits<float>::infinity() ? 0.0f : -std::numeric_limits<float>::infinity();
  if (opt.temperature == 0.0f) return argmax_token(s);
  for (float& v : s) v /= opt.temperature;
  Candidates c(s);
  return sample_categorical(c, rng, draw_index);
}

}  // namespace inferkit
