#pragma once
// GgmlWeights: a row-major matrix stored in one of ggml's tensor types (GGUF's weights), rows x
// cols, each row ggml_row_bytes(type, cols) bytes, exactly as the file lays it out. view() wraps
// the bytes zero-copy (an mmap'd GGUF tensor); owning() takes a buffer (a quantizer's output).
// The kernels read ggml's own block layout directly, so loading never repacks and never changes
// a value: load time is the validation pass only.
//
//   const inferkit::GgufTensor& t = file.tensor("blk.0.attn_q.weight");
//   auto w = inferkit::GgmlWeights::view(t.info.type, t.info.rows(), t.info.dims[0], t.data, t.info.name);
//   inferkit::ggml_dequantize_row(w, 0, row0);   // row 0 as floats (ggml_matvec.hpp: y = W x)
//
// Validation (view and owning): rows, cols > 0; cols a multiple of the type's block size; the
// span exactly rows * row_bytes bytes; the type one of ggml_weights_supported(); every stored
// float finite (F32 / F16 / BF16 elements, the binary16 d / dmin / m factors of block types).
// Errors name the tensor, e.g. "inferkit: tensor 'blk.0.ffn_up.weight' type = IQ2_XS is invalid:
// ...". A zero-row or NaN-scaled tensor is an error at load, never a NaN at the first token.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inferkit/core/convert.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/ggml_type.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/activation_rows.hpp"
#include "inferkit/quant/ggml_blocks.hpp"

namespace inferkit {

/// Whether GgmlWeights (and the ggml_* kernels) accept tensors of type `t`.
inline bool ggml_weights_supported(GgmlType t) { return detail::ggml_block_codec(t) != nullptr; }

/// A rows x cols matrix of ggml blocks (file comment). Copying a view copies the view; copying
/// an owning matrix copies its bytes.
class GgmlWeights {
 public:
  /// An empty 0 x 0 matrix (of type F32).
  GgmlWeights() = default;

  /// Wraps `bytes` (not copied: they must outlive the matrix) after validating them (file
  /// comment). Throws std::invalid_argument naming `tensor_name` and the bad value.
  static GgmlWeights view(GgmlType type, Index rows, Index cols, std::span<const std::byte> bytes,
                          std::string_view tensor_name) {
    GgmlWeights w(type, rows, cols, bytes.size(), tensor_name);
    w.data_ = bytes.data();
    w.validate_values();
    return w;
  }

  /// Takes ownership of `bytes` after the same validation as view().
  static GgmlWeights owning(GgmlType type, Index rows, Index cols, std::vector<std::byte> bytes,
                            std::string_view tensor_name) {
    GgmlWeights w(type, rows, cols, bytes.size(), tensor_name);
    w.owned_ = std::move(bytes);
    w.data_ = w.owned_.data();
    w.validate_values();
    return w;
  }

  GgmlWeights(const GgmlWeights& o) { *this = o; }  ///< copy (an owning matrix copies its bytes)
  GgmlWeights& operator=(const GgmlWeights& o) {    ///< copy assignment (as the copy constructor)
    if (this == &o) return *this;
    type_ = o.type_;
    rows_ = o.rows_;
    cols_ = o.cols_;
    row_bytes_ = o.row_bytes_;
    name_ = o.name_;
    owned_ = o.owned_;
    data_ = o.owns_data() ? owned_.data() : o.data_;
    return *this;
  }
  GgmlWeights(GgmlWeights&& o) noexcept { *this = std::move(o); }  ///< move (no byte copy)
  GgmlWeights& operator=(GgmlWeights&& o) noexcept {               ///< move assignment
    if (this == &o) return *this;
    const bool owns = o.owns_data();
    type_ = o.type_;
    rows_ = o.rows_;
    cols_ = o.cols_;
    row_bytes_ = o.row_bytes_;
    name_ = std::move(o.name_);
    owned_ = std::move(o.owned_);
    data_ = owns ? owned_.data() : o.data_;
    o.data_ = nullptr;
    o.rows_ = o.cols_ = 0;
    o.row_bytes_ = 0;
    return *this;
  }
  ~GgmlWeights() = default;

  GgmlType type() const { return type_; }               ///< the ggml element type
  Index rows() const { return rows_; }                  ///< output features (ggml's ne[1])
  Index cols() const { return cols_; }                  ///< input features (ggml's ne[0])
  std::size_t row_bytes() const { return row_bytes_; }  ///< bytes per row (whole blocks)
  const std::string& name() const { return name_; }     ///< the tensor name errors cite
  bool owns_data() const { return !owned_.empty(); }    ///< true for owning(), false for view()
  const std::byte* row(Index r) const { return data_ + static_cast<std::size_t>(r) * row_bytes_; }  ///< row r's bytes
  /// Every byte, rows back to back.
  std::span<const std::byte> bytes() const { return {data_, static_cast<std::size_t>(rows_) * row_bytes_}; }
  /// Elements per block of the type (1 for F32 / F16 / BF16, 32 or 256 for block types).
  Index block_size() const { return static_cast<Index>(ggml_block_size(type_)); }

 private:
  GgmlWeights(GgmlType type, Index rows, Index cols, std::size_t size, std::string_view name)
      : type_(type), rows_(rows), cols_(cols), name_(name) {
    const std::string tensor = "tensor '" + name_ + "'";
    require(ggml_weights_supported(type), tensor + " type", ggml_type_name(type),
            "is not a weight type inferkit's ggml kernels support");
    require(rows > 0, tensor + " rows", rows, "must be > 0");
    require(cols > 0, tensor + " cols", cols, "must be > 0");
    const auto bs = static_cast<Index>(ggml_block_size(type));
    require(cols % bs == 0, tensor + " cols", cols,
            "must be a multiple of " + std::to_string(bs) + " (the block size of " + ggml_type_name(type) + ")");
    row_bytes_ = static_cast<std::size_t>(cols / bs) * ggml_block_bytes(type);
    std::size_t total = 0;
    const bool overflow = __builtin_mul_overflow(static_cast<std::size_t>(rows), row_bytes_, &total);
    require(!overflow && total == size, tensor + " bytes", size,
            "must be rows * row bytes = " + std::to_string(rows) + " * " + std::to_string(row_bytes_) +
                (overflow ? " (overflows)" : " = " + std::to_string(total)));
  }

  // Every stored float finite: elements of the plain types, block factors of the others.
  void validate_values() const {
    const std::string tensor = "tensor '" + name_ + "'";
    const auto* codec = detail::ggml_block_codec(type_);
    const Index blocks = cols_ / block_size();
    std::vector<float> tmp;
    for (Index r = 0; r < rows_; ++r) {
      const std::byte* p = row(r);
      if (type_ == GgmlType::kF32 || type_ == GgmlType::kF16 || type_ == GgmlType::kBF16) {
        const float* f = reinterpret_cast<const float*>(p);
        if (type_ != GgmlType::kF32) {
          tmp.resize(static_cast<std::size_t>(cols_));
          detail::ggml_plain_row_to_float(type_, p, cols_, tmp.data());
          f = tmp.data();
        } else if (reinterpret_cast<std::uintptr_t>(p) % alignof(float) != 0) {
          tmp.resize(static_cast<std::size_t>(cols_));
          std::memcpy(tmp.data(), p, row_bytes_);
          f = tmp.data();
        }
        if (!detail::all_finite(f, cols_))
          for (Index c = 0; c < cols_; ++c)
            if (!std::isfinite(f[c]))
              throw_invalid_argument(tensor + " element (" + std::to_string(r) + ", " + std::to_string(c) + ")", f[c],
                                     "must be finite");
        continue;
      }
      for (Index b = 0; b < blocks; ++b) {
        const std::byte* blk = p + static_cast<std::size_t>(b) * codec->block_bytes;
        for (int i = 0; i < codec->factor_count; ++i) {
          std::uint16_t bits;
          std::memcpy(&bits, blk + codec->factor_offsets[i], 2);
          if ((bits & 0x7C00u) == 0x7C00u)  // binary16 exponent all ones: Inf or NaN
            throw_invalid_argument(tensor + " row " + std::to_string(r) + " block " + std::to_string(b) + " factor " +
                                       codec->factor_names[i],
                                   to_float(Float16{bits}), "must be finite");
        }
      }
    }
  }

  GgmlType type_ = GgmlType::kF32;
  Index rows_ = 0, cols_ = 0;
  std::size_t row_bytes_ = 0;
  std::string name_;
  std::vector<std::byte> owned_;
  const std::byte* data_ = nullptr;
};

/// Row `row` of `w` as floats: out[k] = the stored value (F32 / F16 / BF16, exact) or the
/// block type's dequantization formula (detail/ggml_blocks.hpp, exact in float). Throws
/// std::out_of_range naming `row`, std::invalid_argument naming `out.size()`.
inline void ggml_dequantize_row(const GgmlWeights& w, Index row, std::span<float> out) {
  require_index(row, w.rows(), "row");
  require(static_cast<Index>(out.size()) == w.cols(), "out.size()", out.size(),
          "must equal w.cols() (" + std::to_string(w.cols()) + ")");
  detail::ggml_dequantize(w.type(), w.row(row), w.cols(), out.data());
}

}  // namespace inferkit
