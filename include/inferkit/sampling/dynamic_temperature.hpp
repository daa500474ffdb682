#pragma once
// Dynamic temperature (entropy-scaled; kalomaze's DynaTemp as llama.cpp's temp_ext sampler): the
// temperature moves between T - delta and T + delta with the normalized entropy of the
// candidates,
//   T_dyn = max(0, T - delta) + ((T + delta) - max(0, T - delta)) * (H / log N)^exponent,
// with H = -sum p_i log p_i over the N current candidates (nats; H / log N clamped to [0, 1]
// against rounding), then logits / T_dyn. A confident (low-entropy) step samples colder, an
// uncertain one hotter. delta == 0 is the plain temperature rule (T == 0 greedy); with
// delta > 0 and a single candidate nothing changes (llama.cpp), and T_dyn == 0 is greedy.
//
// One pass gives Z and sum w (l - max), hence H (detail/mass.hpp's float_block_mass: float
// partial sums of 8 terms, since no keep / drop boundary rides on Z here), then one pass divides.
// The rule (a chain stage): DynamicTemperature{0.8f, 0.5f, 1.0f}; alone on a row:
// apply_dynamic_temperature(logits, {0.8f, 0.5f, 1.0f}).

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include "inferkit/core/error.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"
#include "inferkit/sampling/detail/mass.hpp"
#include "inferkit/sampling/temperature.hpp"

namespace inferkit {

/// Dynamic temperature's parameters (llama.cpp: --temp, --dynatemp-range, --dynatemp-exp).
struct DynamicTemperature {
  float temperature = 1.0f;  ///< centre T, >= 0
  float range = 0.0f;        ///< delta, >= 0 (0 = the plain temperature rule)
  float exponent = 1.0f;     ///< shape of the entropy map, >= 0

  /// The registered name, "dynamic_temperature": describe() starts with it.
  static constexpr std::string_view kName = "dynamic_temperature";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const;
  /// "dynamic_temperature(temperature, range, exponent)".
  std::string describe() const { return describe_rule(kName, {temperature, range, exponent}); }
  /// apply_dynamic_temperature() on the candidates (the temperature follows their entropy).
  void apply(Candidates& c, const StepInputs&) const;
};

/// Checks the parameters; throws std::invalid_argument naming the bad one.
inline void validate_dynamic_temperature(const DynamicTemperature& q) {
  validate_temperature(q.temperature);
  require(std::isfinite(q.range) && q.range >= 0.0f, "dynatemp_range", q.range, "must be finite and >= 0");
  require(std::isfinite(q.exponent) && q.exponent >= 0.0f, "dynatemp_exponent", q.exponent, "must be finite and >= 0");
}

/// The temperature the rule uses for normalized entropy h in [0, 1].
inline double dynamic_temperature_for(const DynamicTemperature& q, double h) {
  const double lo = std::max(0.0, double(q.temperature) - double(q.range));
  const double hi = double(q.temperature) + double(q.range);
  return lo + (hi - lo) * std::pow(std::clamp(h, 0.0, 1.0), double(q.exponent));
}

/// Applies dynamic temperature to the candidates.
inline void apply_dynamic_temperature(Candidates& c, const DynamicTemperature& q) {
  validate_dynamic_temperature(q);
  if (q.range == 0.0f) {
    apply_temperature(c, q.temperature);
    return;
  }
  const detail::CandidateMass m = detail::float_block_mass<true>(c, c.summary().max);
  if (m.count <= 1) return;
  const float t = static_cast<float>(dynamic_temperature_for(q, m.entropy() / std::log(double(m.count))));
  apply_temperature(c, t);  // t == 0: greedy
}

/// In place on one row; filtered tokens become -inf.
inline void apply_dynamic_temperature(std::span<float> logits, const DynamicTemperature& q) {
  Candidates c(logits);
  apply_dynamic_temperature(c, q);
  c.materialize();
}

inline void DynamicTemperature::validate() const { validate_dynamic_temperature(*this); }
inline void DynamicTemperature::apply(Candidates& c, const StepInputs&) const { apply_dynamic_temperature(c, *this); }

}  // namespace inferkit
