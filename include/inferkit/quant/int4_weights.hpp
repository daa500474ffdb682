#pragma once
// Weights quantized to 4 bits in groups of `group_size` (32 or 64) consecutive input features
// of one output channel, symmetric or asymmetric, with binary16 step (and minimum), packed once
// from float rows. The rounding rules are the KV codecs' (core/quant_rounding.hpp):
//
//   symmetric:  step = f16_up(max|w| / 7),             code = round(w / step) + 8 in [1, 15]
//   asymmetric: min = f16_down(min w), step = f16_up((max w - min) / 15),
//               code = round((w - min) / step) in [0, 15]
//
// and a weight dequantizes as code * step + zero, zero = -8 * step (symmetric) or min: within
// half a stored step of the float weight. A last group shorter than `group_size` (input
// features not a multiple of it) takes its parameters from its own features.
//
// Layout: each row holds its codes in chunks of 64 features (32 bytes): byte j of a chunk
// holds feature j in its low nibble and feature 32 + j in its high nibble, so one 32-byte load
// unpacks into 64 codes in feature order (and, for group size 32, each nibble plane is exactly
// one group). Features past the end (up to a multiple of 64) hold code 0; kernels give them a
// zero activation. Steps (and minima) are stored per row, one per group, unpadded.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/quant_rounding.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Grouping and symmetry of an int4 weight format.
struct Int4Spec {
  Index group_size = 32;  ///< input features per step: 32 or 64
  bool symmetric = true;  ///< codes centred on 8 (no stored minimum) or a stored binary16 minimum
};

/// An out x in weight matrix (row-major, y = W x) quantized to grouped int4.
/// Immutable after construction; const access is thread-safe.
class Int4Weights {
 public:
  /// Features per packed chunk (32 bytes).
  static constexpr Index kChunk = 64;

  /// An empty 0 x 0 matrix.
  Int4Weights() = default;

  /// Quantizes `w` (rows = output channels, cols = input features). Throws
  /// std::invalid_argument naming `spec.group_size` unless it is 32 or 64, `w(row, col)` for a
  /// NaN or infinite weight, and `w row <n> group <g>` when a group's range overflows the
  /// binary16 step or minimum (|w| beyond about 65504 * 7).
  explicit Int4Weights(MatrixView<const float> w, Int4Spec spec = {}) : rows_(w.rows()), cols_(w.cols()), spec_(spec) {
    require(spec.group_size == 32 || spec.group_size == 64, "spec.group_size", spec.group_size, "must be 32 or 64");
    pcols_ = (cols_ + kChunk - 1) / kChunk * kChunk;
    groups_ = (cols_ + spec.group_size - 1) / spec.group_size;
    codes_.assign(static_cast<std::size_t>(rows_ * pcols_ / 2), 0);
    steps_.assign(static_cast<std::size_t>(rows_ * groups_), Float16{});
    if (!spec.symmetric) mins_.assign(static_cast<std::size_t>(rows_ * groups_), Float16{});
    for (Index n = 0; n < rows_; ++n) {
      const float* row = w.row_ptr(n);
      for (Index k = 0; k < cols_; ++k)
        if (!std::isfinite(row[k]))
          throw_invalid_argument("w(" + std::to_string(n) + ", " + std::to_string(k) + ")", row[k],
                                 "weights to quantize must be finite");
      for (Index g = 0; g < groups_; ++g) {
        const Index k0 = g * spec.group_size, k1 = std::min(cols_, k0 + spec.group_size);
        float lo = std::numeric_limits<float>::infinity(), hi = -lo, amax = 0.0f;
        for (Index k = k0; k < k1; ++k) {
          lo = std::min(lo, row[k]);
          hi = std::max(hi, row[k]);
          amax = std::max(amax, std::abs(row[k]));
        }
        const std::size_t gi = static_cast<std::size_t>(n * groups_ + g);
        float step = 0.0f, zero = 0.0f;
        if (spec.symmetric) {
          steps_[gi] = symmetric_step_f16(amax, 7);
          step = to_float(steps_[gi]);
        } else {
          const AsymmetricStepF16 p = asymmetric_step_f16(lo, hi, 15);
          steps_[gi] = p.step;
          mins_[gi] = p.min;
          step = to_float(p.step);
          zero = to_float(p.min);
        }
        if (!std::isfinite(step) || !std::isfinite(zero))
          throw_invalid_argument("w row " + std::to_string(n) + " group " + std::to_string(g) + " max |w|",
                                 std::max(std::abs(lo), std::abs(hi)), "is too large for a binary16 int4 step");
        for (Index k = k0; k < k1; ++k) {
          const int c = spec.symmetric ? symmetric_code(row[k], step, 7) + 8 : quantize_code(row[k], step, zero, 15, 0);
          put(n, k, c);
        }
      }
    }
  }

  /// Output channels.
  Index rows() const { return rows_; }
  /// Input features.
  Index cols() const { return cols_; }
  /// Input features rounded up to a whole chunk (kChunk).
  Index padded_cols() const { return pcols_; }
  /// The grouping and symmetry.
  const Int4Spec& spec() const { return spec_; }
  /// Groups per row: ceil(cols / group_size).
  Index groups_per_row() const { return groups_; }

  /// Bytes held: packed codes (rows x padded_cols / 2), one binary16 step per group and, if
  /// asymmetric, one binary16 minimum per group.
  std::size_t bytes() const { return codes_.size() + (steps_.size() + mins_.size()) * sizeof(Float16); }

  /// Stored code (0..15) of W[n, k]. No bounds check.
  int code(Index n, Index k) const {
    const std::uint8_t b = codes_[static_cast<std::size_t>(byte_index(n, k))];
    return (k % kChunk) < kChunk / 2 ? (b & 0xF) : (b >> 4);
  }
  /// Step of group `g` of row `n`, as a float. No bounds check.
  float step(Index n, Index g) const { return to_float(steps_[static_cast<std::size_t>(n * groups_ + g)]); }
  /// Zero of group `g` of row `n`: -8 * step (symmetric) or the stored minimum.
  float zero(Index n, Index g) const {
    return spec_.symmetric ? -8.0f * step(n, g) : to_float(mins_[static_cast<std::size_t>(n * groups_ + g)]);
  }
  /// code(n, k) * step + zero: the weight the kernels multiply by.
  float dequantized(Index n, Index k) const {
    const Index g = k / spec_.group_size;
    return static_cast<float>(code(n, k)) * step(n, g) + zero(n, g);
  }

  /// Packed codes of row `n`: padded_cols / 2 bytes (see the layout above).
  const std::uint8_t* row_codes(Index n) const { return codes_.data() + n * (pcols_ / 2); }
  /// Binary16 steps of row `n` (groups_per_row of them).
  const Float16* row_steps(Index n) const { return steps_.data() + n * groups_; }
  /// Binary16 minima of row `n` (asymmetric only; null otherwise).
  const Float16* row_mins(Index n) const { return mins_.empty() ? nullptr : mins_.data() + n * groups_; }

 private:
  Index byte_index(Index n, Index k) const { return n * (pcols_ / 2) + (k / kChunk) * (kChunk / 2) + k % (kChunk / 2); }
  void put(Index n, Index k, int c) {
    std::uint8_t& b = codes_[static_cast<std::size_t>(byte_index(n, k))];
    if ((k % kChunk) < kChunk / 2)
      b = static_cast<std::uint8_t>((b & 0xF0) | c);
    else
      b = static_cast<std::uint8_t>((b & 0x0F) | (c << 4));
  }

  Index rows_ = 0, cols_ = 0, pcols_ = 0, groups_ = 0;
  Int4Spec spec_{};
  std::vector<std::uint8_t> codes_;
  std::vector<Float16> steps_, mins_;
};

}  // namespace inferkit
