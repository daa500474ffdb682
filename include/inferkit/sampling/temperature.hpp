#pragma once
// Temperature: logits / T for T > 0 (Hugging Face and llama.cpp divide, so do we). T == 0 means
// greedy: only the argmax survives, ties going to the lowest id. T < 0 or non-finite is an error.

#include <cmath>
#include <span>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/sampling/candidates.hpp"

namespace inferkit {

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
  if (c.dense()) {
    const simd::VecF t = simd::broadcast(temperature);
    std::size_t i = 0;
    for (; i + simd::kWidth <= x.size(); i += simd::kWidth) simd::store(x.data() + i, simd::load(x.data() + i) / t);
    for (; i < x.size(); ++i) x[i] /= temperature;
  } else {
    for (TokenId id : c.ids()) x[id] /= temperature;
  }
  c.logits_changed();
}

/// In place on one row; filtered tokens become -inf.
inline void apply_temperature(std::span<float> logits, float temperature) {
  Candidates c(logits);
  apply_temperature(c, temperature);
  c.materialize();
}

}  // namespace inferkit
