#pragma once
// Rotary position embedding (Su et al. 2021). Pair i of the first `rotary_dim` dimensions rotates
// by the angle pos * base^(-2i / rotary_dim). Two pair conventions exist in the wild:
//   RopeStyle::kAdjacentPairs: (x[2i], x[2i+1])             llama2.c, GPT-J, Meta's llama
//   RopeStyle::kHalfSplit:     (x[i], x[i + rotary_dim/2])   GPT-NeoX, Hugging Face Llama
// Both are applied in place to a [tokens, heads, head_dim] tensor; positions are per token.
// Frequency factors (Llama 3.1's scaling as GGUF files store it, the `rope_freqs` tensor) divide
// pair i's frequency by factor[i], as llama.cpp's rope does with its freq_factors input.
// Angles are computed in double and rounded once, so large positions stay accurate.

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

enum class RopeStyle { kAdjacentPairs, kHalfSplit };

/// Rotary position embedding (Su et al. 2021) parameters.
struct RopeOptions {
  RopeStyle style =
      RopeStyle::kAdjacentPairs;  ///< pair convention: adjacent (llama2.c, GPT-J) or half-split (GPT-NeoX, HF Llama)
  double base = 10000.0;          ///< frequency base: pair i rotates by position * base^(-2i / rotary_dim)
  Index rotary_dim = 0;  ///< rotated dimensions: 0 = the whole head_dim, otherwise an even prefix of it (0 = the whole
                         ///< head_dim; otherwise an even prefix of it)
  /// Empty, or rotary_dim / 2 positive factors: pair i rotates by position * base^(-2i / rotary_dim)
  /// / freq_factors[i] (the span must outlive every call that uses these options).
  std::span<const float> freq_factors{};
};

namespace detail {
/// The rotary dimension for rows of head_dim values, after checking the options.
inline Index rope_rotary_dim(Index head_dim, const RopeOptions& opt) {
  require(std::isfinite(opt.base) && opt.base > 1.0, "base", opt.base, "must be finite and > 1");
  const Index rd = opt.rotary_dim == 0 ? head_dim : opt.rotary_dim;
  require(rd > 0 && rd <= head_dim && rd % 2 == 0, "rotary_dim", opt.rotary_dim,
          "must be 0 or an even number in [2, head_dim = " + std::to_string(head_dim) + "]");
  return rd;
}

/// The rd / 2 frequencies base^(-2i / rd), each divided by its frequency factor when opt has them.
inline std::vector<double> rope_inv_freq(Index rd, const RopeOptions& opt) {
  std::vector<double> inv_freq(static_cast<std::size_t>(rd / 2));
  const auto& f = opt.freq_factors;
  require(f.empty() || f.size() == inv_freq.size(), "freq_factors.size()", f.size(),
          "must be 0 or rotary_dim / 2 = " + std::to_string(inv_freq.size()));
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(opt.base, -2.0 * double(i) / double(rd));
    if (!f.empty()) {
      require(std::isfinite(f[i]) && f[i] > 0.0f, "freq_factors[" + std::to_string(i) + "]", f[i],
              "must be finite and > 0");
      inv_freq[i] /= double(f[i]);
    }
  }
  return inv_freq;
}

/// cos and sin of each frequency's angle at a position.
inline void rope_cos_sin(std::int64_t position, const std::vector<double>& inv_freq, float* cos_t, float* sin_t) {
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = double(position) * inv_freq[i];
    cos_t[i] = static_cast<float>(std::cos(angle));
    sin_t[i] = static_cast<float>(std::sin(angle));
  }
}

inline void rope_rotate_token(float* row_heads, Index heads, Index head_stride, Index rd, RopeStyle style,
                              const float* cos_t, const float* sin_t) {
  const Index half = rd / 2;
  for (Index h = 0; h < heads; ++h) {
    float* v = row_heads + h * head_stride;
    for (Index i = 0; i < half; ++i) {
      const Index a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
      const Index b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cos_t[i] - x1 * sin_t[i];
      v[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}
}  // namespace detail

/// Rotates x = [tokens, heads, head_dim] in place; token t is at positions[t].
inline void apply_rope(Tensor3View<float> x, std::span<const std::int32_t> positions, const RopeOptions& opt = {}) {
  const Index rd = detail::rope_rotary_dim(x.dim2(), opt);
  require(static_cast<Index>(positions.size()) == x.dim0(), "positions.size()", positions.size(),
          "must equal the number of tokens (" + std::to_string(x.dim0()) + ")");
  const std::vector<double> inv_freq = detail::rope_inv_freq(rd, opt);
  std::vector<float> cos_t(inv_freq.size()), sin_t(inv_freq.size());
  for (Index t = 0; t < x.dim0(); ++t) {
    detail::rope_cos_sin(positions[t], inv_freq, cos_t.data(), sin_t.data());
    detail::rope_rotate_token(x.ptr(t, 0), x.dim1(), x.stride1(), rd, opt.style, cos_t.data(), sin_t.data());
  }
}

/// Rotates x = [tokens, heads, head_dim] in place; token t is at first_position + t.
inline void apply_rope(Tensor3View<float> x, std::int32_t first_position, const RopeOptions& opt = {}) {
  std::vector<std::int32_t> pos(static_cast<std::size_t>(x.dim0()));
  for (std::size_t t = 0; t < pos.size(); ++t) pos[t] = first_position + static_cast<std::int32_t>(t);
  apply_rope(x, std::span<const std::int32_t>(pos), opt);
}

}  // namespace inferkit
