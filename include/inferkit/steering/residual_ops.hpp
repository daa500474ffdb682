#pragma once
// Edits of one residual-stream vector h (one token at one layer), the two primitives of
// activation steering:
//   addition  h += scale * v                          (activation addition, Turner et al. 2023;
//                                                      contrastive activation addition, Rimsky
//                                                      et al. 2024)
//   ablation  h -= scale * ((h . u) / (u . u)) * u     (directional ablation, Arditi et al. 2024:
//                                                      scale 1 removes the component along u,
//                                                      scale 2 reflects it, 0 < scale < 1
//                                                      removes part of it)
// Ablation takes any non-zero u (it need not be unit length): dividing by u . u projects onto
// exactly the float vector given, with no rounding from a normalization.
//
// Scale 0 is the identity, bitwise (h is not touched at all, so -0.0 and NaN payloads stay).
// With preserve_norm the edited h is rescaled to its norm before the edit:
// h <- h' * float(||h|| / ||h'||); a zero h' stays zero (no direction to rescale along).
//
// Numerics (proved in docs/design.md, checked by the tests): dot products and norms are exact
// float products accumulated in double (order: steering/detail/f64_accumulate.hpp); the update
// is one simd::fma per element (two roundings on ISAs without FMA). With eps = 2^-24 and d the
// vector length:
//   after ablation with scale 1:  |h' . u| <= 2 eps (|h . u| + ||h'|| ||u||) + (d + 1) 2^-52 ||h|| ||u||
//   after a norm-preserving edit: | ||h'|| - ||h|| | <= 2.000001 eps ||h||
// (a norm-preserving ablation multiplies the first bound by ||h|| / ||h'||, the rescaling).
// Results are deterministic for a build (same bits on every run and thread count); builds for
// different vector widths may differ in the last bit of a float.

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/steering/detail/f64_accumulate.hpp"

namespace inferkit {

/// Strength of one residual edit.
struct EditOptions {
  /// Multiplier: the added vector is scale * v; an ablation removes scale times the component
  /// along u. Must be finite; 0 leaves h bitwise unchanged.
  float scale = 1.0f;
  /// Rescale the edited vector back to the norm it had before the edit.
  bool preserve_norm = false;
};

namespace detail {

/// True iff every x[i] is finite (x - x is 0 for finite x and NaN otherwise; NaN propagates).
inline bool all_finite(const float* x, std::size_t n) {
  simd::VecF acc = simd::broadcast(0.0f);
  std::size_t i = 0;
  for (; i + simd::kWidth <= n; i += simd::kWidth) {
    const simd::VecF v = simd::load(x + i);
    acc = acc + (v - v);
  }
  if (i < n) {
    const simd::VecF v = simd::load_partial(x + i, n - i, 0.0f);
    acc = acc + (v - v);
  }
  return simd::hsum(acc) == 0.0f;
}

/// h += scale * v over d floats, no validation (callers validated v and scale once).
inline void add_direction_unchecked(float* h, const float* v, std::size_t d, EditOptions opt) {
  if (opt.scale == 0.0f) return;
  if (opt.preserve_norm)
    restore_norm(h, d, axpy_with_norms(h, opt.scale, v, d));
  else
    simd::axpy(h, opt.scale, v, d);
}

/// h -= scale * (h . u) / uu * u over d floats, with uu = u . u > 0 precomputed (as
/// squared_norm_f64), no validation.
inline void ablate_direction_unchecked(float* h, const float* u, double uu, std::size_t d, EditOptions opt) {
  if (opt.scale == 0.0f) return;
  const auto a = static_cast<float>(-static_cast<double>(opt.scale) * (dot_f64(h, u, d) / uu));
  if (a == 0.0f) return;  // h is already orthogonal to u (to double precision)
  if (opt.preserve_norm)
    restore_norm(h, d, axpy_with_norms(h, a, u, d));
  else
    simd::axpy(h, a, u, d);
}

/// Throws std::invalid_argument naming `name[i]` for the first non-finite element of x.
inline void require_all_finite(std::span<const float> x, const char* name) {
  if (all_finite(x.data(), x.size())) [[likely]]
    return;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]))
      throw_invalid_argument(std::string(name) + "[" + std::to_string(i) + "]", x[i], "must be finite");
}

inline void require_same_size(std::size_t got, std::size_t want, const char* parameter) {
  require(got == want, parameter, got, "must equal h.size() (" + std::to_string(want) + ")");
}

}  // namespace detail

/// Activation addition on one residual vector: h += opt.scale * v, then, with
/// opt.preserve_norm, h rescaled to its norm before the addition.
/// @param h    the residual-stream vector of one token at one layer (d floats), edited in place
/// @param v    the steering vector (d floats, any norm; a zero v adds nothing)
/// @param opt  scale (finite; 0 leaves h bitwise unchanged) and norm preservation
/// @throws std::invalid_argument if v.size() != h.size(), v has a non-finite element or the
///         scale is not finite. Checking v costs one pass over it: for many tokens use a
///         SteeringPlan, which checks its vectors once.
/// Thread-safety: none needed beyond the caller's: reads v, writes only h.
inline void add_direction(std::span<float> h, std::span<const float> v, EditOptions opt = {}) {
  detail::require_same_size(v.size(), h.size(), "v.size()");
  require_finite(opt.scale, "scale");
  detail::require_all_finite(v, "v");
  detail::add_direction_unchecked(h.data(), v.data(), h.size(), opt);
}

/// Directional ablation on one residual vector: h -= opt.scale * ((h . u) / (u . u)) * u, then,
/// with opt.preserve_norm, h rescaled to its norm before the edit. With scale 1 the result is
/// orthogonal to u to rounding (the bound is in the file comment).
/// @param h    the residual-stream vector (d floats), edited in place
/// @param u    the direction (d floats, any non-zero norm; need not be unit length)
/// @param opt  scale (finite; 1 removes the component, 0 leaves h bitwise unchanged) and norm
///             preservation
/// @throws std::invalid_argument if u.size() != h.size(), u is zero or has a non-finite element
///         (its squared norm is 0, infinite or NaN), or the scale is not finite.
inline void ablate_direction(std::span<float> h, std::span<const float> u, EditOptions opt = {}) {
  detail::require_same_size(u.size(), h.size(), "u.size()");
  require_finite(opt.scale, "scale");
  const double uu = detail::squared_norm_f64(u.data(), u.size());
  require(uu > 0.0 && std::isfinite(uu), "u . u", uu, "must be finite and > 0: ablation needs a direction");
  detail::ablate_direction_unchecked(h.data(), u.data(), uu, h.size(), opt);
}

}  // namespace inferkit
