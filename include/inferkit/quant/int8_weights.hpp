#pragma once
// Weights quantized to int8 per output channel (symmetric), packed once from float rows.
//
//   scale_n = max_k |W[n, k]| / 127 (float32),  code = round(W[n, k] / scale_n) in [-127, 127]
//
// (round to nearest, ties to even; core/quant_rounding.hpp's symmetric rule). -128 is never
// used, so |code| <= 127 and the AVX2 sign trick cannot saturate. W[n, k] dequantizes to
// code * scale_n, within half a step of the float weight.
//
// Layout (one layout for every kernel path): output channels in panels of 16, input features
// in quads of 4; panel p holds, for each quad q, the 16 channels' 4 codes as 64 consecutive
// bytes (byte 4c + i = channel 16p + c, feature 4q + i). That is the operand order of
// vpdpbusd (AVX-512 VNNI): one 64-byte load multiplies 16 channels by one broadcast quad of
// activations. Padding (channels up to a multiple of 16, features up to a multiple of 4) holds
// zero codes and zero scales. Each channel also keeps the sum of its codes, which the VNNI path
// needs to undo the +128 offset of its unsigned activations.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/quant_rounding.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// An out x in weight matrix (row-major, y = W x) quantized to int8 per output channel.
/// Immutable after construction; const access is thread-safe.
class Int8Weights {
 public:
  /// Output channels per panel (the lanes of one 512-bit int32 accumulator).
  static constexpr Index kPanel = 16;
  /// Input features per dot-product group (the 4 bytes vpdpbusd sums into one lane).
  static constexpr Index kQuad = 4;
  /// Largest code magnitude.
  static constexpr int kMaxCode = 127;
  /// Largest number of input features: the VNNI path sums up to 255 * 127 per feature in int32.
  static constexpr Index kMaxCols = 65536;

  /// An empty 0 x 0 matrix.
  Int8Weights() = default;

  /// Quantizes `w` (rows = output channels, cols = input features). Throws
  /// std::invalid_argument naming `w(row, col)` for a NaN or infinite weight, and `w.cols()`
  /// when it exceeds kMaxCols.
  explicit Int8Weights(MatrixView<const float> w)
      : rows_(w.rows()), cols_(w.cols()), prows_(round_up(w.rows(), kPanel)), pcols_(round_up(w.cols(), kQuad)) {
    require(cols_ <= kMaxCols, "w.cols()", cols_,
            "must be <= " + std::to_string(kMaxCols) + " (int32 accumulation of the VNNI path)");
    codes_.assign(static_cast<std::size_t>(prows_ * pcols_), 0);
    scales_.assign(static_cast<std::size_t>(prows_), 0.0f);
    sums_.assign(static_cast<std::size_t>(prows_), 0);
    for (Index n = 0; n < rows_; ++n) {
      const float* row = w.row_ptr(n);
      float amax = 0.0f;
      for (Index k = 0; k < cols_; ++k) {
        const float v = row[k];
        if (!std::isfinite(v))
          throw_invalid_argument("w(" + std::to_string(n) + ", " + std::to_string(k) + ")", v,
                                 "weights to quantize must be finite");
        amax = std::max(amax, std::abs(v));
      }
      const float scale = amax / static_cast<float>(kMaxCode);
      scales_[static_cast<std::size_t>(n)] = scale;
      std::int32_t sum = 0;
      for (Index k = 0; k < cols_; ++k) {
        const int c = symmetric_code(row[k], scale, kMaxCode);
        codes_[static_cast<std::size_t>(offset(n, k))] = static_cast<std::int8_t>(c);
        sum += c;
      }
      sums_[static_cast<std::size_t>(n)] = sum;
    }
  }

  /// Output channels.
  Index rows() const { return rows_; }
  /// Input features.
  Index cols() const { return cols_; }
  /// Output channels rounded up to a whole panel (kPanel).
  Index padded_rows() const { return prows_; }
  /// Input features rounded up to a whole quad (kQuad).
  Index padded_cols() const { return pcols_; }
  /// Panels of kPanel output channels.
  Index panels() const { return prows_ / kPanel; }

  /// Bytes held: codes (padded_rows x padded_cols), one float scale and one int32 code sum per
  /// padded channel.
  std::size_t bytes() const {
    return codes_.size() * sizeof(std::int8_t) + scales_.size() * sizeof(float) + sums_.size() * sizeof(std::int32_t);
  }

  /// Scale of output channel `n` (0 for an all-zero row). No bounds check.
  float scale(Index n) const { return scales_[static_cast<std::size_t>(n)]; }
  /// Stored code of W[n, k], in [-127, 127]. No bounds check.
  int code(Index n, Index k) const { return codes_[static_cast<std::size_t>(offset(n, k))]; }
  /// code(n, k) * scale(n): the weight the kernels multiply by.
  float dequantized(Index n, Index k) const { return static_cast<float>(code(n, k)) * scale(n); }

  /// Codes of panel `p`: padded_cols / 4 quads of 64 bytes (see the layout above).
  const std::int8_t* panel(Index p) const { return codes_.data() + p * kPanel * pcols_; }
  /// Scales of all padded channels.
  const float* scales() const { return scales_.data(); }
  /// Sum of the codes of each padded channel.
  const std::int32_t* code_sums() const { return sums_.data(); }

 private:
  static Index round_up(Index v, Index m) { return (v + m - 1) / m * m; }
  Index offset(Index n, Index k) const {
    return (n / kPanel) * kPanel * pcols_ + (k / kQuad) * (kPanel * kQuad) + (n % kPanel) * kQuad + k % kQuad;
  }

  Index rows_ = 0, cols_ = 0, prows_ = 0, pcols_ = 0;
  std::vector<std::int8_t> codes_;
  std::vector<float> scales_;
  std::vector<std::int32_t> sums_;
};

}  // namespace inferkit
