#pragma once
// Mirostat (Basu, Ramakrishnan, Kumar, Varshney 2021, "Mirostat: a neural text decoding
// algorithm that directly controls perplexity"), versions 1 and 2 as llama.cpp implements them.
// A feedback loop keeps the surprise of the sampled tokens near a target tau (bits): the state
// mu starts at 2 tau; each step truncates the candidates by mu, a token is drawn from the
// renormalized rest, and then
//   mu <- mu - eta * (S - tau),   S = -log2 p(token) under the distribution it was drawn from.
// The rule keeps its own per-request state, mu (MirostatState, held in the request's
// SamplerState): make_state() sets it to 2 tau, the rule's accept() hook applies the update when
// the committed token is the one the chain drew (SamplerChain::accept, sampler_state.hpp).
// Truncation:
//   v2: keep the candidates with surprise -log2 p_i <= mu, i.e. w_i >= Z 2^-mu; none: keep the
//       most probable (lowest id among ties).
//   v1: estimate the Zipf exponent s from the m most probable candidates by least squares
//       (Algorithm 1 of the paper): with them sorted descending, t_i = ln((i+2)/(i+1)) and
//       b_i = ln(p_i / p_{i+1}) = l_i - l_{i+1} for i < min(m, count) - 1,
//         s = sum t_i b_i / sum t_i^2,  eps = s - 1,
//         k = (eps 2^mu / (1 - N^-eps))^(1/s)   (N = vocabulary size; eps -> 0 gives 2^mu / ln N),
//       then keep the top max(1, floor(k)) candidates (all when k is not finite or exceeds them).
// Probabilities are over the current candidates (llama.cpp applies temperature first and no other
// truncation). v1 ranks only the m best (a top-m selection), v2 is sort-free (min-p's machinery).
// The rule (a chain stage, stateful, one per chain): Mirostat{2, 5.0f, 0.1f}; alone on a row:
// apply_mirostat(logits, Mirostat{2, 5.0f, 0.1f}, mu).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/bytes.hpp"
#include "inferkit/sampling/detail/mass.hpp"
#include "inferkit/sampling/detail/mass_threshold.hpp"
#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/top_k.hpp"

namespace inferkit {

/// Mirostat's per-request state: the controller's mu (bits). Serialized as record tag 1 of
/// SamplerState::to_bytes() (4 bytes: mu as a little-endian float), and in version 1 of that
/// format as its fixed mu field.
struct MirostatState {
  float mu = 0.0f;  ///< the surprise bound of the next truncation, finite

  /// Its record tag in SamplerState's version-2 bytes (never reused for another state).
  static constexpr std::uint16_t kTag = 1;
  /// Appends the payload (mu, 4 bytes).
  void write(std::vector<std::uint8_t>& out) const { detail::append_le(out, std::bit_cast<std::uint32_t>(mu), 4); }
  /// Reads a payload written by write(); throws std::invalid_argument for a wrong size or a
  /// non-finite mu.
  static MirostatState read(std::span<const std::uint8_t> payload) {
    require(payload.size() == 4, "bytes mirostat record size", payload.size(), "must be 4");
    const MirostatState s{std::bit_cast<float>(static_cast<std::uint32_t>(detail::read_le(payload, 0, 4)))};
    require(std::isfinite(s.mu), "bytes mu", s.mu, "must be finite");
    return s;
  }
  /// Equal when the two mu compare equal (float ==).
  friend bool operator==(const MirostatState&, const MirostatState&) = default;
};

/// Mirostat's parameters (llama.cpp's defaults: tau 5, eta 0.1, m 100).
struct Mirostat {
  int version = 2;   ///< 1 or 2
  float tau = 5.0f;  ///< target surprise in bits, > 0
  float eta = 0.1f;  ///< learning rate, > 0
  Index m = 100;     ///< v1: candidates used to estimate the Zipf exponent, >= 2

  /// The registered name, "mirostat": describe() starts with it.
  static constexpr std::string_view kName = "mirostat";
  /// Keeps its own State in the request's SamplerState: the chain needs one.
  static constexpr bool kStateful = true;
  /// The per-request state (mu), held in the request's SamplerState.
  using State = MirostatState;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "mirostat_v1(tau, eta, m)" or "mirostat_v2(tau, eta)".
  std::string describe() const {
    return version == 1 ? describe_rule("mirostat_v1", {tau, eta, double(m)})
                        : describe_rule("mirostat_v2", {tau, eta});
  }
  /// mu = 2 tau (paper and llama.cpp).
  State initial_state() const;
  /// apply_mirostat() with the request's mu (the draw follows; accept() updates mu).
  void apply(Candidates& c, const StepInputs& in, const State& s) const;
  /// mu -= eta (surprise - tau) when the committed token is the one drawn (a forced or verified
  /// token's surprise under this distribution is unknown: mu stays).
  void accept(State& s, const AcceptedToken& t) const;
};

/// Checks Mirostat's parameters; throws std::invalid_argument naming the bad one.
inline void validate_mirostat(const Mirostat& q) {
  require(q.version == 1 || q.version == 2, "mirostat", q.version, "must be 1 or 2 (0 = off in the presets)");
  require(std::isfinite(q.tau) && q.tau > 0.0f, "mirostat_tau", q.tau, "must be finite and > 0");
  require(std::isfinite(q.eta) && q.eta > 0.0f, "mirostat_eta", q.eta, "must be finite and > 0");
  require(q.m >= 2, "mirostat_m", q.m, "must be >= 2");
}

/// mu at the start of a request: 2 tau (paper and llama.cpp).
inline float mirostat_initial_mu(const Mirostat& q) { return 2.0f * q.tau; }

/// mu after drawing a token whose surprise under the draw's distribution was `surprise_bits`.
inline float mirostat_update(const Mirostat& q, float mu, double surprise_bits) {
  return mu - q.eta * (static_cast<float>(surprise_bits) - q.tau);
}

/// Mirostat v1's k for Zipf exponent s, mu and vocabulary size N (double; may be inf or NaN).
inline double mirostat_v1_k(double s, float mu, Index vocab) {
  const double eps = s - 1.0;
  const double two_mu = std::exp2(double(mu));
  const double ratio =
      std::abs(eps) < 1e-12 ? two_mu / std::log(double(vocab)) : eps * two_mu / (1.0 - std::pow(double(vocab), -eps));
  return std::pow(ratio, 1.0 / s);
}

/// Applies Mirostat's truncation for state mu to the candidates (the draw follows).
inline void apply_mirostat(Candidates& c, const Mirostat& q, float mu) {
  validate_mirostat(q);
  require(std::isfinite(mu), "mirostat_mu", mu, "must be finite");
  const float max = c.summary().max;
  const auto x = c.logits();
  if (q.version == 2) {
    const double scale = std::exp2(-double(mu));
    const auto threshold = [&](const detail::CandidateMass& m) { return m.z * scale; };
    if (!detail::keep_weight_at_least_of_mass(c, max, false, threshold, 1)) apply_top_k(c, 1);
    return;
  }
  // v1: the m best, ranked.
  std::vector<TokenId> top;
  if (c.dense()) {
    top = detail::select_top_k_dense(x, q.m);
  } else {
    top = c.ids();
    detail::keep_first_k(top, x, q.m);
  }
  std::sort(top.begin(), top.end(), DecodingOrder{x});
  if (top.size() <= 1) return;
  double sum_tb = 0.0, sum_tt = 0.0;
  for (std::size_t i = 0; i + 1 < top.size(); ++i) {
    const double t = std::log(double(i + 2) / double(i + 1));
    const double b = double(x[static_cast<std::size_t>(top[i])]) - double(x[static_cast<std::size_t>(top[i + 1])]);
    sum_tb += t * b;
    sum_tt += t * t;
  }
  const double k = mirostat_v1_k(sum_tb / sum_tt, mu, c.vocab_size());
  if (!(k >= 1.0)) {  // NaN or below 1: the most probable alone
    c.restrict_to({top.front()});
    return;
  }
  if (!(k < double(top.size()))) {  // more than the m ranked: a top-k selection (k may be inf)
    apply_top_k(c, k < double(c.vocab_size()) ? static_cast<Index>(k) : c.vocab_size());
    return;
  }
  top.resize(static_cast<std::size_t>(k));
  c.restrict_to(std::move(top));
}

/// In place on one row (the truncation only); filtered tokens become -inf.
inline void apply_mirostat(std::span<float> logits, const Mirostat& q, float mu) {
  Candidates c(logits);
  apply_mirostat(c, q, mu);
  c.materialize();
}

inline void Mirostat::validate() const { validate_mirostat(*this); }
inline MirostatState Mirostat::initial_state() const { return {mirostat_initial_mu(*this)}; }
inline void Mirostat::apply(Candidates& c, const StepInputs&, const State& s) const { apply_mirostat(c, *this, s.mu); }
inline void Mirostat::accept(State& s, const AcceptedToken& t) const {
  if (t.drawn) s.mu = mirostat_update(*this, s.mu, t.surprise_bits);
}

}  // namespace inferkit
