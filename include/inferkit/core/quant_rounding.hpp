#pragma once
// Rounding rules shared by every quantizer in inferkit (the KV cache codecs of kv/ and the
// weight formats of quant/): one step (and, asymmetric, one minimum) per group, stored as
// binary16 rounded outward, so the stored step is never smaller than the exact one and the
// stored minimum never larger than the true minimum; codes round to nearest (ties to even) and
// clamp to the code range. Every element then dequantizes within half a stored step.
//
//   symmetric:  step = max|x| / q_max                  code = round(x / step) + offset
//   asymmetric: step = (max - min) / levels, zero = min code = round((x - min) / step)

#include <algorithm>
#include <cmath>

#include "inferkit/core/half.hpp"

namespace inferkit {

/// Smallest binary16 value >= x, for finite x >= 0 (+inf when x exceeds the binary16 range).
inline Float16 f16_round_up(float x) {
  Float16 h = to_float16(x);
  if (to_float(h) < x) ++h.bits;  // positive values: the next bit pattern is the next value up
  return h;
}

/// Largest binary16 value <= x, for finite x (-inf when x is below the binary16 range).
inline Float16 f16_round_down(float x) {
  Float16 h = to_float16(x);
  if (to_float(h) > x) {
    if (x >= 0.0f)
      --h.bits;
    else
      ++h.bits;  // negative values grow in magnitude with the bit pattern
  }
  return h;
}

/// Stored binary16 step of a symmetric group: the smallest binary16 value >= `abs_max / q_max`.
/// `abs_max` is max |x| over the group (finite, >= 0); `q_max` the largest code magnitude
/// (127 for 8 bits, 7 for 4 bits). The result is +inf when the step overflows binary16:
/// callers reject that group.
inline Float16 symmetric_step_f16(float abs_max, int q_max) {
  return f16_round_up(abs_max / static_cast<float>(q_max));
}

/// Stored binary16 step and minimum of one asymmetric group.
struct AsymmetricStepF16 {
  Float16 step{};  ///< smallest binary16 >= (max - min_stored) / levels
  Float16 min{};   ///< largest binary16 <= the group's minimum
};

/// Stored parameters of an asymmetric group with values in [`lo`, `hi`] (finite) and codes
/// 0..`levels`: the minimum rounds down, then the step rounds up, so `min + levels * step`
/// covers `hi`. Either field is infinite when the range overflows binary16: callers reject it.
inline AsymmetricStepF16 asymmetric_step_f16(float lo, float hi, int levels) {
  AsymmetricStepF16 p;
  p.min = f16_round_down(lo);
  p.step = f16_round_up((hi - to_float(p.min)) / static_cast<float>(levels));
  return p;
}

/// Signed code of `x` under a symmetric step: round(x / step) to nearest (ties to even),
/// clamped to [-q_max, q_max]; 0 for a zero step. The weight and activation formats of quant/
/// use this form (their codes are stored signed, or offset by a constant).
inline int symmetric_code(float x, float step, int q_max) {
  if (step == 0.0f) return 0;
  const float q = std::nearbyint(x / step);
  return static_cast<int>(std::clamp(q, -static_cast<float>(q_max), static_cast<float>(q_max)));
}

/// Code of `x` for a group that dequantizes as `code * step + zero`: round((x - zero) / step)
/// to nearest (ties to even under the default rounding mode), clamped to [0, max_code]. A zero
/// step (a group of zeros) gives `code_for_zero_step`.
inline int quantize_code(float x, float step, float zero, int max_code, int code_for_zero_step) {
  if (step == 0.0f) return code_for_zero_step;
  const float q = std::nearbyint((x - zero) / step);
  return static_cast<int>(std::clamp(q, 0.0f, static_cast<float>(max_code)));
}

}  // namespace inferkit
