#pragma once
// Temperature: logits / T for T > 0 (Hugging Face and llama.cpp divide, so do we). T == 0 means
// greedy: only the argmax survives, ties going to the lowest id. T < 0 or non-finite is an error.
// A T so small that max / T overflows divides (logits - max) / T instead (the same softmax: the
// maximum becomes 0, the rest -inf or finite), where plain division would give +inf logits and a
// NaN distribution (found by fuzzing: min_p(1) then T = 1.2e-38).
// The rule (a chain stage): Temperature{0.8f}; alone on a row: apply_temperature(logits, 0.8f).

#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"
#include "inferkit/sampling/decoding_rule.hpp"

namespace inferkit {

/// Checks a temperature (finite, >= 0); throws std::invalid_argument.
inline void validate_temperature(float temperature) {
  require(std::isfinite(temperature) && temperature >= 0.0f, "temperature", temperature,
          "must be finite and >= 0 (0 = greedy)");
}

inline void apply_temperature(Candidates& c, float temperature) {
  validate_temperature(temperature);
  if (temperature == 0.0f) {
    c.restrict_to({c.summary().argmax});
    return;
  }
  if (temperature == 1.0f) return;
  std::span<float> x = c.logits();
  const float mx = c.summary().max;
  const float shift = std::isfinite(mx / temperature) ? 0.0f : mx;  // see the header comment
  if (c.dense()) {
    const simd::VecF t = simd::broadcast(temperature), sh = simd::broadcast(shift);
    std::size_t i = 0;
    if (shift == 0.0f)
      for (; i + simd::kWidth <= x.size(); i += simd::kWidth) simd::store(x.data() + i, simd::load(x.data() + i) / t);
    else
      for (; i + simd::kWidth <= x.size(); i += simd::kWidth)
        simd::store(x.data() + i, (simd::load(x.data() + i) - sh) / t);
    for (; i < x.size(); ++i) x[i] = (x[i] - shift) / temperature;
  } else {
    for (TokenId id : c.ids()) x[id] = (x[id] - shift) / temperature;
  }
  c.logits_changed();
}

/// In place on one row; filtered tokens become -inf.
inline void apply_temperature(std::span<float> logits, float temperature) {
  Candidates c(logits);
  apply_temperature(c, temperature);
  c.materialize();
}

/// Temperature stage: logits / value (0 = greedy).
struct Temperature {
  float value = 1.0f;  ///< T >= 0

  /// The registered name, "temperature": describe() starts with it.
  static constexpr std::string_view kName = "temperature";
  /// Reads no SamplerState: the chain's stateless apply() and sample() overloads take it.
  static constexpr bool kStateful = false;
  /// Throws std::invalid_argument naming the bad parameter and its value (SamplerChain::add() calls it).
  void validate() const { validate_temperature(value); }
  /// "temperature(value)".
  std::string describe() const { return describe_rule(kName, {value}); }
  /// apply_temperature() on the candidates (0 = greedy: the argmax stays).
  void apply(Candidates& c, const StepInputs&) const { apply_temperature(c, value); }
};

}  // namespace inferkit
