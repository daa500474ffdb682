#pragma once
// Group quantization codecs for KV caches: 8, 4 or 2 bits per element, symmetric or asymmetric,
// one scale (and, asymmetric, one minimum) per group of `group_size` values, bit-packed (two
// int4 or four int2 codes per byte, low bits first).
//
//   symmetric:  step = max|x| / (2^(b-1) - 1), code q = round(x / step) in [-(2^(b-1) - 1), ...]
//   asymmetric: step = (max - min) / (2^b - 1), code q = round((x - min) / step) in [0, 2^b - 1]
// Metadata is stored as binary16, rounded so that the stored step is never smaller than the
// exact one and the stored minimum never larger than the true minimum: every element then
// dequantizes within half a stored step of its value. Codes are kept unsigned (symmetric codes
// are offset by 2^(b-1)), so both modes dequantize as x' = code * step + zero with
// zero = min (asymmetric) or -2^(b-1) * step (symmetric). NaN or infinite input is an error;
// a group whose step would overflow binary16 (|x| beyond about 65504 * (2^(b-1) - 1)) too.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/quant_rounding.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Along which axis a quantization group runs.
enum class QuantAxis {
  kPerToken,   ///< a group is `group_size` consecutive values of one token's row (along head_dim)
  kPerChannel  ///< a group is one channel over `group_size` consecutive tokens (KIVI keys)
};

/// How one stream (keys or values) of a KV cache is quantized.
struct QuantSpec {
  int bits = 8;                           ///< 8, 4 or 2 bits per code
  bool symmetric = true;                  ///< symmetric (step only) or asymmetric (step and minimum)
  Index group_size = 32;                  ///< values per scale: along head_dim (per-token) or tokens (per-channel)
  QuantAxis axis = QuantAxis::kPerToken;  ///< group axis
  Index residual = 0;                     ///< most recent tokens kept in full precision (KIVI)
  /// Set by kv_quant_preset(name) without a head_dim: a cache whose head_dim is not a multiple of
  /// a per-token group_size uses gcd(group_size, head_dim) instead (head_dim 80: group 16); see
  /// fit_kv_quant(). False: the group is used as given and a mismatch is an error.
  bool fit_group_to_head_dim = false;

  int levels() const { return (1 << bits) - 1; }                    ///< largest unsigned code
  int offset() const { return symmetric ? (1 << (bits - 1)) : 0; }  ///< code of 0 (symmetric), else 0
  int codes_per_byte() const { return 8 / bits; }                   ///< codes packed in one byte
  /// Metadata bytes per group: one binary16 step, plus one binary16 minimum if asymmetric.
  int meta_bytes() const { return symmetric ? 2 : 4; }
};

/// Keys and values quantized independently (their errors enter attention at different points:
/// keys through the scores, values through the weighted sum).
struct KvQuantConfig {
  QuantSpec keys;    ///< the key stream's spec
  QuantSpec values;  ///< the value stream's spec
};

/// Checks a spec on its own (bits, group size, residual); `name` prefixes the field in errors.
/// @throws std::invalid_argument naming `name.field` and its value.
inline void validate_quant_spec(const QuantSpec& s, const std::string& name) {
  require(s.bits == 8 || s.bits == 4 || s.bits == 2, name + ".bits", s.bits, "must be 8, 4 or 2");
  require(s.group_size >= 1, name + ".group_size", s.group_size, "must be >= 1");
  require(s.residual >= 0, name + ".residual", s.residual, "must be >= 0");
  if (s.axis == QuantAxis::kPerToken)
    require(s.group_size % s.codes_per_byte() == 0, name + ".group_size", s.group_size,
            "must be a multiple of " + std::to_string(s.codes_per_byte()) + " for " + std::to_string(s.bits) +
                "-bit codes packed along head_dim");
}

/// Checks a spec for rows of `head_dim` values: packed codes fill whole bytes, and per-token
/// groups divide the row.
inline void validate_kv_quant(const QuantSpec& s, Index head_dim, const std::string& name) {
  validate_quant_spec(s, name);
  require(head_dim % s.codes_per_byte() == 0, "head_dim", head_dim,
          "must be a multiple of " + std::to_string(s.codes_per_byte()) + " for packed codes");
  if (s.axis == QuantAxis::kPerToken && head_dim % s.group_size != 0)
    throw_invalid_argument("head_dim", head_dim,
                           "must be a multiple of " + name + ".group_size (" + std::to_string(s.group_size) +
                               "): use a group_size dividing head_dim (e.g. " +
                               std::to_string(std::gcd(s.group_size, head_dim)) +
                               "), or kv_quant_preset(name), whose groups fit any head_dim");
}

/// The spec a cache with rows of head_dim values uses: `s` itself, except that a per-token spec
/// with fit_group_to_head_dim whose group_size does not divide head_dim gets the largest group
/// dividing both, gcd(group_size, head_dim) (head_dim 80 with group 32: 16). Per-channel groups
/// run over tokens and are never changed. Every cache calls it before validate_kv_quant().
inline QuantSpec fit_kv_quant(QuantSpec s, Index head_dim) {
  if (s.fit_group_to_head_dim && s.axis == QuantAxis::kPerToken && head_dim > 0 && s.group_size > 0 &&
      head_dim % s.group_size != 0)
    s.group_size = std::gcd(s.group_size, head_dim);
  return s;
}

namespace detail {
// The rounding rules live in core/quant_rounding.hpp (shared with quant/); kept here by their
// old names for existing callers.
using ::inferkit::f16_round_down;
using ::inferkit::f16_round_up;
}  // namespace detail

/// Step and zero of one group, as stored.
struct QuantParams {
  Float16 step{};  ///< binary16 step, rounded up from the exact one
  Float16 min{};   ///< binary16 minimum, rounded down (asymmetric only) (asymmetric only)
  /// The value code 0 stands for: min (asymmetric) or -2^(bits-1) * step (symmetric).
  float zero(const QuantSpec& s) const {
    return s.symmetric ? -static_cast<float>(s.offset()) * to_float(step) : to_float(min);
  }
};

/// Stored parameters of a group whose values lie in [lo, hi] with max |x| = amax (all finite).
/// Throws std::invalid_argument when the group's step or minimum overflows binary16.
inline QuantParams params_for_range(float lo, float hi, float amax, const QuantSpec& s) {
  QuantParams p;
  if (s.symmetric) {
    p.step = symmetric_step_f16(amax, s.offset() - 1 > 0 ? s.offset() - 1 : 1);
  } else {
    const AsymmetricStepF16 a = asymmetric_step_f16(lo, hi, s.levels());
    p.step = a.step;
    p.min = a.min;
  }
  if (!std::isfinite(to_float(p.step)) || !std::isfinite(to_float(p.min)))
    throw_invalid_argument("kv group range", std::max(std::abs(lo), std::abs(hi)),
                           "is too large for a binary16 quantization step");
  return p;
}

namespace detail {
// Running range of a group: its values must be finite (std::invalid_argument otherwise).
struct GroupRange {
  float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity(), amax = 0.0f;
  void add(float v) {
    if (!std::isfinite(v)) throw_invalid_argument("kv value", v, "keys and values to quantize must be finite");
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    amax = std::max(amax, std::abs(v));
  }
  QuantParams params(const QuantSpec& s) const { return params_for_range(lo, hi, amax, s); }
};
}  // namespace detail

/// Chooses the stored parameters for a group of values (read with a stride).
inline QuantParams choose_params(const float* x, Index n, Index stride, const QuantSpec& s) {
  detail::GroupRange r;
  for (Index i = 0; i < n; ++i) r.add(x[i * stride]);
  return r.params(s);
}

/// Code of one value under the stored parameters (round to nearest, clamped to the code range).
inline int encode(float x, const QuantParams& p, const QuantSpec& s) {
  return quantize_code(x, to_float(p.step), p.zero(s), s.symmetric ? 2 * s.offset() - 1 : s.levels(),
                       s.symmetric ? s.offset() : 0);
}

inline float decode(int code, const QuantParams& p, const QuantSpec& s) {
  return static_cast<float>(code) * to_float(p.step) + p.zero(s);
}

/// Writes code `c` (< 2^bits) at element index i of a packed byte array.
inline void put_code(std::uint8_t* bytes, Index i, int c, int bits) {
  const int per = 8 / bits;
  std::uint8_t& b = bytes[i / per];
  const int shift = static_cast<int>(i % per) * bits;
  const int mask = ((1 << bits) - 1) << shift;
  b = static_cast<std::uint8_t>((b & ~mask) | (c << shift));
}
inline int get_code(const std::uint8_t* bytes, Index i, int bits) {
  const int per = 8 / bits;
  return (bytes[i / per] >> (static_cast<int>(i % per) * bits)) & ((1 << bits) - 1);
}

}  // namespace inferkit
