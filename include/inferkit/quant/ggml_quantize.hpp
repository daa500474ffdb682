#pragma once
// Quantization from float into every ggml block type (the runner's `quantize`), and the `_M`
// mixes (which tensor of a model gets which type).
//
//   const auto w = inferkit::ggml_quantize(inferkit::GgmlType::kQ4_K, floats /*rows x cols*/, "blk.0.ffn_up.weight",
//   2); const auto t = inferkit::ggml_mix_type(inferkit::GgmlMix::kQ4_K_M, "blk.3.attn_v.weight", 22);  // Q6_K
//
// How scales are chosen (per block; layouts and symbols of ggml_blocks.hpp). Each group (32
// weights; 16 for Q6_K, Q3_K, Q2_K) first gets a start from its extremes:
//   symmetric types (Q4_0, Q5_0; Q6_K, Q3_K per 16): the group's value of largest |x|, v, maps
//     to the most negative code: step = v / -2^(bits-1), so the asymmetric code range
//     -2^(b-1) .. 2^(b-1) - 1 is used on the side that needs it (Q8_0: max|x| / 127, no search);
//   affine types: Q4_1 / Q5_1 m = -min x, step = (max x + m) / (2^bits - 1); the K-quants (Q4_K,
//     Q5_K per 32, Q2_K per 16), whose minimums are subtracted multiples of dmin >= 0:
//     m = max(0, -min x), step likewise; codes round((x + m) / step).
// Scale search (the rule): 21 candidates divide the start's range by (levels + delta), delta =
// -1, -0.9, .., 1 (levels = 2^bits - 1; 2^(bits-1) for the symmetric types); each candidate's codes
// get the least-squares step (and minimum, kept >= 0 for the K-quants) that fits x with those
// codes, and the group keeps the fit of least squared error, the start's own error included
// (so never worse than the start; exactly representable groups stay exact).
// K-quant super-blocks then store d = max_j step_j / S (S = 63 for the 6-bit scales, 15 for
// Q2_K's 4 bits, 127 for Q6_K's int8, 31 for Q3_K's signed 6 bits), sc_j = round(step_j / d), and
// likewise dmin for the minimums; every code is recomputed with the scales as stored (binary16,
// 6- / 8-bit), so the error is that of the stored factors.
// Relative RMS error on N(0, 1) weights, 16 x 4096 (test_ggml_quantize.cpp holds these, +3%),
// before the search -> with it: Q8_0 0.0054, Q6_K 0.0188 -> 0.0173, Q5_1 0.038 -> 0.0339, Q5_K
// 0.038 -> 0.0360, Q5_0 0.0427 -> 0.0401, Q4_1 0.078 -> 0.0701, Q4_K 0.078 -> 0.0715, Q4_0 0.086
// -> 0.0809, Q3_K 0.155 -> 0.1435, Q2_K 0.328 -> 0.270. On a random F16 llama model (7.1 M
// weights, dequantized by ggml_dequantize_row) the error is at most llama-quantize's (--pure) on
// the same file: Q4_K 0.0712 vs 0.0713, Q5_K 0.0358 vs 0.0361, Q6_K 0.0173 vs 0.0177, Q3_K
// 0.1436 vs 0.1508, Q2_K 0.270 vs 0.297, Q4_0 0.0809 vs 0.0859, Q4_1 0.0698 vs 0.0782, Q5_0
// 0.0401 vs 0.0427, Q5_1 0.0337 vs 0.0378, Q8_0 0.0053 vs 0.0054.
//
// Mixes (a documented rule, after the shape of llama.cpp's, not its exact choices):
//   *_K_M: `output.weight` (the classifier) -> Q6_K; `attn_v.weight` and `ffn_down.weight` ->
//     Q6_K (Q4_K_M, Q5_K_M) or Q5_K (Q3_K_M) on the layers that get more bits (the first and
//     last eighth, and every third layer between), the base type elsewhere; Q3_K_M also puts
//     `attn_output.weight` in Q4_K; every other matrix the base type (Q4_K, Q5_K, Q3_K);
//   1-D tensors (norms, biases) stay F32;
//   a K-quant whose row length is not a multiple of 256 falls back to a 32-block type of at
//     least the bits: Q2_K / Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/ggml_type.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/quant_rounding.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/activation_rows.hpp"
#include "inferkit/quant/detail/parallel.hpp"
#include "inferkit/quant/ggml_blocks.hpp"
#include "inferkit/quant/ggml_weights.hpp"

namespace inferkit {

namespace detail {

/// Stores v as binary16 at p (little-endian) and returns the stored value.
inline float ggml_put_half(std::uint8_t* p, float v) {
  const Float16 h = to_float16(v);
  p[0] = static_cast<std::uint8_t>(h.bits & 0xFF);
  p[1] = static_cast<std::uint8_t>(h.bits >> 8);
  return to_float(h);
}

/// round(v / step) clamped to [lo, hi] (0 when step is 0).
inline int ggml_code(float v, float step, int lo, int hi) {
  if (step == 0.0f || !std::isfinite(v / step)) return std::clamp(0, lo, hi);
  return static_cast<int>(std::clamp(std::nearbyint(v / step), static_cast<float>(lo), static_cast<float>(hi)));
}

/// The value of largest magnitude in x[0..n) (the first such, keeping its sign).
inline float ggml_signed_max(const float* x, int n) {
  float v = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::abs(x[i]) > std::abs(v)) v = x[i];
  return v;
}

/// The scale search's candidates (file comment): range / (levels + delta), delta = -1 .. 1 by 0.1.
inline constexpr int kGgmlSearchCandidates = 21;
inline float ggml_search_delta(int i) { return -1.0f + 0.1f * static_cast<float>(i); }

/// Affine group parameters x ~ step * u - m, u in 0 .. levels (file comment's search). With
/// `free_min` m has either sign (Q4_1 / Q5_1: m = -min x to start); otherwise m >= 0 (the
/// K-quants subtract dmin multiples: m = max(0, -min x) to start).
inline void ggml_affine(const float* x, int n, int levels, bool free_min, float& step, float& m) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (!free_min) lo = std::min(lo, 0.0f);
  m = -lo;
  step = std::max(0.0f, hi - lo) / static_cast<float>(levels);
  if (!(step > 0.0f)) return;
  double best = 0, sx = 0, sxx = 0;  // best: the start's squared error, its codes from the stored rule
  for (int i = 0; i < n; ++i) {
    const double r = step * static_cast<float>(ggml_code(x[i] + m, step, 0, levels)) - m - x[i];
    best += r * r;
    sx += x[i];
    sxx += double(x[i]) * x[i];
  }
  for (int c = 0; c < kGgmlSearchCandidates; ++c) {
    const float inv = (static_cast<float>(levels) + ggml_search_delta(c)) / (hi - lo);
    double su = 0, suu = 0, sux = 0;
    for (int i = 0; i < n; ++i) {
      const double u = std::clamp(std::nearbyint((x[i] - lo) * inv), 0.0f, static_cast<float>(levels));
      su += u;
      suu += u * u;
      sux += u * x[i];
    }
    // Least squares x ~ s u + o for these codes (o = -m <= 0 unless free_min), and its squared
    // error sum (s u + o - x)^2 from the sums: an upper bound of the error once re-rounded.
    const double det = n * suu - su * su;
    if (!(det > 0)) continue;
    double s = (n * sux - su * sx) / det, o = (sx - s * su) / n;
    if (!free_min && o > 0) {
      o = 0;
      s = sux / suu;
    }
    if (!(s > 0)) continue;
    const double e = std::max(0.0, s * s * suu + 2 * s * o * su + n * o * o - 2 * s * sux - 2 * o * sx + sxx);
    if (e < best) {
      best = e;
      step = static_cast<float>(s);
      m = static_cast<float>(-o);
    }
  }
}

/// Symmetric group step: codes round(x / step) in -half .. half - 1 (file comment's search,
/// starting from the value of largest |x| at code -half).
inline float ggml_symmetric_step(const float* x, int n, int half) {
  const float v = ggml_signed_max(x, n);
  float step = v / static_cast<float>(-half);
  if (v == 0.0f) return step;
  double best = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    const double r = step * static_cast<float>(ggml_code(x[i], step, -half, half - 1)) - x[i];
    best += r * r;
    sxx += double(x[i]) * x[i];
  }
  for (int c = 0; c < kGgmlSearchCandidates; ++c) {
    const float inv = -(static_cast<float>(half) + ggml_search_delta(c)) / v;
    double sqq = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const double q = std::clamp(std::nearbyint(x[i] * inv), static_cast<float>(-half), static_cast<float>(half - 1));
      sqq += q * q;
      sqx += q * x[i];
    }
    if (!(sqq > 0)) continue;
    const double e = std::max(0.0, sxx - sqx * sqx / sqq);  // least squares s = sqx / sqq for these codes
    if (e < best) {
      best = e;
      step = static_cast<float>(sqx / sqq);
    }
  }
  return step;
}

/// Legacy 32-weight blocks (file comment's rules).
inline void ggml_quantize_block32(GgmlType t, const float* x, std::uint8_t* b) {
  int u[32];
  const bool five = t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1;
  if (t == GgmlType::kQ8_0) {
    const float d = ggml_put_half(b, std::abs(ggml_signed_max(x, 32)) / 127.0f);
    for (int i = 0; i < 32; ++i)
      b[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(symmetric_code(x[i], d, 127)));
    return;
  }
  std::uint8_t* qs;
  std::uint8_t* qh = nullptr;
  if (t == GgmlType::kQ4_0 || t == GgmlType::kQ5_0) {
    const int half_range = five ? 16 : 8;
    const float d = ggml_put_half(b, ggml_symmetric_step(x, 32, half_range));
    for (int i = 0; i < 32; ++i) u[i] = ggml_code(x[i], d, -half_range, half_range - 1) + half_range;
    qh = five ? b + 2 : nullptr;
    qs = five ? b + 6 : b + 2;
  } else {  // Q4_1, Q5_1
    // m is a free binary16 here (w = d u + m), of either sign.
    float step, m;
    ggml_affine(x, 32, five ? 31 : 15, true, step, m);
    const float d = ggml_put_half(b, step), mh = ggml_put_half(b + 2, -m);
    for (int i = 0; i < 32; ++i) u[i] = ggml_code(x[i] - mh, d, 0, five ? 31 : 15);
    qh = five ? b + 4 : nullptr;
    qs = five ? b + 8 : b + 4;
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<std::uint8_t>((u[j] & 15) | (u[j + 16] & 15) << 4);
  if (qh) {
    std::uint32_t bits = 0;
    for (int i = 0; i < 32; ++i) bits |= static_cast<std::uint32_t>(u[i] >> 4) << i;
    for (int i = 0; i < 4; ++i) qh[i] = static_cast<std::uint8_t>(bits >> (8 * i));
  }
}

/// Super-block factor of group values v[0..n): max |v| / limit, stored as binary16 at p.
inline float ggml_super_factor(std::uint8_t* p, const float* v, int n, int limit) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::abs(v[i]));
  return ggml_put_half(p, m / static_cast<float>(limit));
}

/// K-quant super-blocks of 256 weights (file comment's rules).
inline void ggml_quantize_block256(GgmlType t, const float* x, std::uint8_t* b) {
  std::memset(b, 0, ggml_block_bytes(t));
  int u[256];
  if (t == GgmlType::kQ4_K || t == GgmlType::kQ5_K) {
    const bool five = t == GgmlType::kQ5_K;
    const int levels = five ? 31 : 15;
    float step[8], mins[8];
    for (int c = 0; c < 8; ++c) ggml_affine(x + 32 * c, 32, levels, false, step[c], mins[c]);
    const float d = ggml_super_factor(b, step, 8, 63), dm = ggml_super_factor(b + 2, mins, 8, 63);
    int sc[8], mn[8];
    for (int c = 0; c < 8; ++c) {
      sc[c] = ggml_code(step[c], d, 0, 63);
      mn[c] = ggml_code(mins[c], dm, 0, 63);
      const float s = d * static_cast<float>(sc[c]), m = dm * static_cast<float>(mn[c]);
      for (int l = 0; l < 32; ++l) u[32 * c + l] = ggml_code(x[32 * c + l] + m, s, 0, levels);
    }
    std::uint8_t* s = b + 4;
    for (int c = 0; c < 4; ++c) {
      s[c] = static_cast<std::uint8_t>(sc[c] | (sc[c + 4] >> 4) << 6);
      s[c + 4] = static_cast<std::uint8_t>(mn[c] | (mn[c + 4] >> 4) << 6);
      s[c + 8] = static_cast<std::uint8_t>((sc[c + 4] & 15) | (mn[c + 4] & 15) << 4);
    }
    std::uint8_t* qs = b + (five ? 48 : 16);
    for (int c = 0; c < 8; ++c)
      for (int l = 0; l < 32; ++l) {
        qs[32 * (c / 2) + l] |= static_cast<std::uint8_t>((u[32 * c + l] & 15) << (4 * (c % 2)));
        if (five) b[16 + l] |= static_cast<std::uint8_t>((u[32 * c + l] >> 4) << c);
      }
    return;
  }
  if (t == GgmlType::kQ2_K) {
    float step[16], mins[16];
    for (int j = 0; j < 16; ++j) ggml_affine(x + 16 * j, 16, 3, false, step[j], mins[j]);
    const float d = ggml_super_factor(b + 80, step, 16, 15), dm = ggml_super_factor(b + 82, mins, 16, 15);
    for (int j = 0; j < 16; ++j) {
      const int sc = ggml_code(step[j], d, 0, 15), mn = ggml_code(mins[j], dm, 0, 15);
      b[j] = static_cast<std::uint8_t>(sc | mn << 4);
      const float s = d * static_cast<float>(sc), m = dm * static_cast<float>(mn);
      for (int i = 0; i < 16; ++i) u[16 * j + i] = ggml_code(x[16 * j + i] + m, s, 0, 3);
    }
    for (int e = 0; e < 256; ++e)
      b[16 + 32 * (e / 128) + e % 32] |= static_cast<std::uint8_t>(u[e] << (2 * ((e / 32) % 4)));
    return;
  }
  // Q6_K and Q3_K: symmetric groups of 16, signed group scales.
  const bool six = t == GgmlType::kQ6_K;
  const int half_range = six ? 32 : 4, limit = six ? 127 : 31;
  float step[16];
  for (int j = 0; j < 16; ++j) step[j] = ggml_symmetric_step(x + 16 * j, 16, half_range);
  const float d = ggml_super_factor(b + (six ? 208 : 108), step, 16, limit);
  int sc[16];
  for (int j = 0; j < 16; ++j) {
    sc[j] = ggml_code(step[j], d, six ? -128 : -32, six ? 127 : 31);
    const float s = d * static_cast<float>(sc[j]);
    for (int i = 0; i < 16; ++i) u[16 * j + i] = ggml_code(x[16 * j + i], s, -half_range, half_range - 1) + half_range;
  }
  if (six) {
    for (int j = 0; j < 16; ++j) b[192 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(sc[j]));
    for (int e = 0; e < 256; ++e) {
      const int n = e / 128, g = (e / 32) % 4, l = e % 32;
      b[64 * n + 32 * (g % 2) + l] |= static_cast<std::uint8_t>((u[e] & 15) << (4 * (g / 2)));
      b[128 + 32 * n + l] |= static_cast<std::uint8_t>((u[e] >> 4) << (2 * g));
    }
  } else {
    for (int j = 0; j < 16; ++j) {
      const int v = sc[j] + 32;
      b[96 + (j < 8 ? j : j - 8)] |= static_cast<std::uint8_t>((v & 15) << (j < 8 ? 0 : 4));
      b[96 + 8 + j % 4] |= static_cast<std::uint8_t>((v >> 4) << (2 * (j / 4)));
    }
    for (int e = 0; e < 256; ++e) {
      b[32 + 32 * (e / 128) + e % 32] |= static_cast<std::uint8_t>((u[e] & 3) << (2 * ((e / 32) % 4)));
      b[e % 32] |= static_cast<std::uint8_t>((u[e] >> 2) << (e / 32));
    }
  }
}

}  // namespace detail

/// `w` (rows x cols floats) in type `t`: F32 / F16 / BF16 by rounding each value (to nearest
/// even), the block types by the file comment's rules. Throws std::invalid_argument naming
/// `tensor_name` for a type the kernels do not support, cols not a multiple of the block size,
/// a NaN / infinite element (with its row and column), or a block whose scale overflows
/// binary16 (|x| beyond about 65504 times the code range: the error names row, block, factor).
inline GgmlWeights ggml_quantize(GgmlType t, MatrixView<const float> w, std::string_view tensor_name,
                                 int num_threads = 1) {
  require_thread_count("num_threads", num_threads);
  const std::string tensor = "tensor '" + std::string(tensor_name) + "'";
  require(ggml_weights_supported(t), tensor + " type", ggml_type_name(t),
          "is not a weight type inferkit's ggml kernels support");
  require(w.rows() > 0 && w.cols() > 0, tensor + " rows", w.rows(), "must be > 0 with cols > 0");
  const auto bs = static_cast<Index>(ggml_block_size(t));
  require(w.cols() % bs == 0, tensor + " cols", w.cols(),
          "must be a multiple of " + std::to_string(bs) + " (the block size of " + ggml_type_name(t) + ")");
  detail::require_finite_rows(w, tensor);
  const std::size_t row_bytes = ggml_row_bytes(t, static_cast<std::uint64_t>(w.cols()));
  std::vector<std::byte> out(row_bytes * static_cast<std::size_t>(w.rows()));
  detail::parallel_items(num_threads == 0 ? resolve_threads(0) : num_threads, w.rows(), [&](Index r) {
    auto* dst = reinterpret_cast<std::uint8_t*>(out.data() + static_cast<std::size_t>(r) * row_bytes);
    const float* x = w.row_ptr(r);
    if (t == GgmlType::kF32) {
      std::memcpy(dst, x, row_bytes);
    } else if (t == GgmlType::kF16 || t == GgmlType::kBF16) {
      for (Index k = 0; k < w.cols(); ++k) {
        const std::uint16_t h = t == GgmlType::kF16 ? to_float16(x[k]).bits : to_bfloat16(x[k]).bits;
        std::memcpy(dst + 2 * k, &h, 2);
      }
    } else {
      for (Index b = 0; b < w.cols() / bs; ++b) {
        std::uint8_t* blk = dst + static_cast<std::size_t>(b) * ggml_block_bytes(t);
        if (bs == 32)
          detail::ggml_quantize_block32(t, x + b * bs, blk);
        else
          detail::ggml_quantize_block256(t, x + b * bs, blk);
      }
    }
  });
  return GgmlWeights::owning(t, w.rows(), w.cols(), std::move(out), tensor_name);
}

/// The quantization mixes of a whole model (file comment).
enum class GgmlMix {
  kQ3_K_M,  ///< Q3_K base; attn_v / ffn_down Q5_K on the more-bits layers (else Q4_K); attn_output Q4_K
  kQ4_K_M,  ///< Q4_K base; attn_v / ffn_down Q6_K on the more-bits layers
  kQ5_K_M,  ///< Q5_K base; attn_v / ffn_down Q6_K on the more-bits layers
};

/// Whether layer i of n gets more bits in a mix: the first and last eighth, and every third
/// layer between them.
inline bool ggml_mix_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/// The 32-block type a K-quant falls back to when a row is not a multiple of 256 (file comment).
inline GgmlType ggml_fallback_type(GgmlType t) {
  switch (t) {
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
      return GgmlType::kQ4_0;
    case GgmlType::kQ4_K:
      return GgmlType::kQ5_0;
    case GgmlType::kQ5_K:
      return GgmlType::kQ5_1;
    case GgmlType::kQ6_K:
      return GgmlType::kQ8_0;
    default:
      return t;
  }
}

/// The type `mix` gives tensor `name` ("blk.<i>.<role>.weight", "output.weight", ...) of a model
/// with `n_layers` layers, for a tensor of `n_dims` dimensions whose rows have `cols` weights
/// (file comment's rule). Throws std::invalid_argument naming `n_layers` when it is not positive.
inline GgmlType ggml_mix_type(GgmlMix mix, std::string_view name, int n_layers, int n_dims = 2, Index cols = 256) {
  require(n_layers > 0, "n_layers", n_layers, "must be > 0");
  if (n_dims < 2) return GgmlType::kF32;
  const GgmlType base = mix == GgmlMix::kQ3_K_M   ? GgmlType::kQ3_K
                        : mix == GgmlMix::kQ4_K_M ? GgmlType::kQ4_K
                                                  : GgmlType::kQ5_K;
  int layer = -1;
  if (name.substr(0, 4) == "blk.") {
    layer = 0;
    for (std::size_t i = 4; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
      layer = std::min(layer * 10 + (name[i] - '0'), 1 << 20);
  }
  const auto has = [&](std::string_view role) { return name.find(role) != std::string_view::npos; };
  GgmlType t = base;
  if (name == "output.weight") {
    t = GgmlType::kQ6_K;
  } else if (layer >= 0 && (has(".attn_v.") || has(".ffn_down."))) {
    const bool more = ggml_mix_more_bits(layer, n_layers);
    t = mix == GgmlMix::kQ3_K_M ? (more ? GgmlType::kQ5_K : GgmlType::kQ4_K) : (more ? GgmlType::kQ6_K : base);
  } else if (mix == GgmlMix::kQ3_K_M && has(".attn_output.")) {
    t = GgmlType::kQ4_K;
  }
  return cols % 256 == 0 ? t : ggml_fallback_type(t);
}

}  // namespace inferkit
