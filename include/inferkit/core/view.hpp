#pragma once
// Non-owning views used at API boundaries: std::span for 1-D, and row-major 2-D / 3-D views
// with explicit strides (the innermost dimension is contiguous). Construction checks extents,
// strides and, when built from a span, that the span holds every element the view can reach.

#include <cstddef>
#include <span>
#include <type_traits>

#include "inferkit/core/error.hpp"

namespace inferkit {

using Index = std::ptrdiff_t;

template <class T>
using Span = std::span<T>;

namespace detail {
// Number of elements a row-major view with these extents and strides reaches (0 if empty).
inline Index reach(Index rows, Index cols, Index row_stride) {
  return (rows == 0 || cols == 0) ? 0 : (rows - 1) * row_stride + cols;
}
}  // namespace detail

/// A rows x cols row-major matrix view; element (i, j) is data[i * row_stride + j].
template <class T>
class MatrixView {
 public:
  using value_type = std::remove_cv_t<T>;  ///< element type without const

  /// An empty 0 x 0 view.
  MatrixView() = default;

  /// rows x cols at data with row_stride elements between rows.
  /// @throws std::invalid_argument for negative extents, row_stride < cols (unless the view has at
  ///         most one row or no columns), or a null data pointer for a non-empty view.
  MatrixView(T* data, Index rows, Index cols, Index row_stride)
      : data_(data), rows_(rows), cols_(cols), row_stride_(row_stride) {
    require(rows >= 0, "rows", rows, "must be >= 0");
    require(cols >= 0, "cols", cols, "must be >= 0");
    // An empty view reaches no element, so any stride a caller computes for it is fine.
    require(row_stride >= cols || rows <= 1 || cols == 0, "row_stride", row_stride,
            "must be >= cols (" + std::to_string(cols) + ")");
    require(data != nullptr || rows * cols == 0, "data", data, "must be non-null for a non-empty view");
  }

  /// Densely packed rows x cols (row stride = cols).
  MatrixView(T* data, Index rows, Index cols) : MatrixView(data, rows, cols, cols) {}

  /// View over a span; the span must hold every element the view reaches.
  MatrixView(std::span<T> storage, Index rows, Index cols, Index row_stride)
      : MatrixView(storage.data(), rows, cols, row_stride) {
    const Index needed = detail::reach(rows, cols, row_stride);
    require(static_cast<Index>(storage.size()) >= needed, "storage.size()", storage.size(),
            "must be >= " + std::to_string(needed) + " for a " + std::to_string(rows) + "x" + std::to_string(cols) +
                " view with row stride " + std::to_string(row_stride));
  }

  /// Densely packed view over a span (checked to hold rows * cols elements).
  MatrixView(std::span<T> storage, Index rows, Index cols) : MatrixView(storage, rows, cols, cols) {}

  /// A mutable view converts to a const one.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
      MatrixView(const MatrixView<U>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()), rows_(other.rows()), cols_(other.cols()), row_stride_(other.row_stride()) {}

  T* data() const { return data_; }                        ///< first element
  Index rows() const { return rows_; }                     ///< number of rows
  Index cols() const { return cols_; }                     ///< number of columns
  Index row_stride() const { return row_stride_; }         ///< elements between consecutive rows
  bool empty() const { return rows_ == 0 || cols_ == 0; }  ///< true when no element is reachable

  /// Element (i, j); not bounds-checked.
  T& operator()(Index i, Index j) const { return data_[i * row_stride_ + j]; }
  /// Start of row i; not bounds-checked.
  T* row_ptr(Index i) const { return data_ + i * row_stride_; }
  /// Row i as a span of cols() elements; not bounds-checked.
  std::span<T> row(Index i) const { return {data_ + i * row_stride_, static_cast<std::size_t>(cols_)}; }

  /// Rows [first, first + count).
  MatrixView rows_slice(Index first, Index count) const {
    require(first >= 0 && count >= 0 && first + count <= rows_, "rows_slice", first,
            "range [" + std::to_string(first) + ", " + std::to_string(first + count) + ") must lie in [0, " +
                std::to_string(rows_) + ")");
    return MatrixView(data_ + first * row_stride_, count, cols_, row_stride_);
  }

 private:
  T* data_ = nullptr;
  Index rows_ = 0;
  Index cols_ = 0;
  Index row_stride_ = 0;
};

/// A d0 x d1 x d2 row-major tensor view; element (i, j, k) is data[i * stride0 + j * stride1 + k].
/// Typical uses: queries [tokens, heads, head_dim], KV caches [heads, tokens, head_dim].
template <class T>
class Tensor3View {
 public:
  using value_type = std::remove_cv_t<T>;  ///< element type without const

  /// An empty 0 x 0 x 0 view.
  Tensor3View() = default;

  /// d0 x d1 x d2 at data with strides stride0 (dimension 0) and stride1 (dimension 1), in
  /// elements; dimension 2 is contiguous.
  /// @throws std::invalid_argument for negative extents or strides, stride1 < d2 (unless d1 <= 1
  ///         or the view is empty), or a null data pointer for a non-empty view.
  Tensor3View(T* data, Index d0, Index d1, Index d2, Index stride0, Index stride1)
      : data_(data), d0_(d0), d1_(d1), d2_(d2), stride0_(stride0), stride1_(stride1) {
    require(d0 >= 0, "d0", d0, "must be >= 0");
    require(d1 >= 0, "d1", d1, "must be >= 0");
    require(d2 >= 0, "d2", d2, "must be >= 0");
    // An empty view (e.g. zero tokens of a head-major [heads, tokens, dim] buffer, whose head
    // stride is then 0) reaches no element, so any non-negative stride is accepted for it.
    const bool empty = d0 == 0 || d1 == 0 || d2 == 0;
    require(stride1 >= d2 || d1 <= 1 || empty, "stride1", stride1, "must be >= d2 (" + std::to_string(d2) + ")");
    require(stride1 >= 0, "stride1", stride1, "must be >= 0");
    require(stride0 >= 0, "stride0", stride0, "must be >= 0");
    require(data != nullptr || d0 * d1 * d2 == 0, "data", data, "must be non-null for a non-empty view");
  }

  /// Densely packed d0 x d1 x d2.
  Tensor3View(T* data, Index d0, Index d1, Index d2) : Tensor3View(data, d0, d1, d2, d1 * d2, d2) {}

  /// Densely packed view over a span (checked to hold d0 * d1 * d2 elements).
  Tensor3View(std::span<T> storage, Index d0, Index d1, Index d2) : Tensor3View(storage.data(), d0, d1, d2) {
    require(static_cast<Index>(storage.size()) >= d0 * d1 * d2, "storage.size()", storage.size(),
            "must be >= " + std::to_string(d0 * d1 * d2) + " for a " + std::to_string(d0) + "x" + std::to_string(d1) +
                "x" + std::to_string(d2) + " view");
  }

  /// A mutable view converts to a const one.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
      Tensor3View(const Tensor3View<U>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()),
        d0_(other.dim0()),
        d1_(other.dim1()),
        d2_(other.dim2()),
        stride0_(other.stride0()),
        stride1_(other.stride1()) {}

  T* data() const { return data_; }           ///< first element
  Index dim0() const { return d0_; }          ///< extent of dimension 0
  Index dim1() const { return d1_; }          ///< extent of dimension 1
  Index dim2() const { return d2_; }          ///< extent of dimension 2 (contiguous)
  Index stride0() const { return stride0_; }  ///< elements between consecutive indices of dimension 0
  Index stride1() const { return stride1_; }  ///< elements between consecutive indices of dimension 1

  /// Element (i, j, k); not bounds-checked.
  T& operator()(Index i, Index j, Index k) const { return data_[i * stride0_ + j * stride1_ + k]; }
  /// Start of the contiguous d2 elements at (i, j); not bounds-checked.
  T* ptr(Index i, Index j) const { return data_ + i * stride0_ + j * stride1_; }

  /// The d1 x d2 matrix at index i of dimension 0.
  MatrixView<T> at0(Index i) const { return MatrixView<T>(data_ + i * stride0_, d1_, d2_, stride1_); }
  /// The d0 x d2 matrix at index j of dimension 1 (e.g. one head of a [tokens, heads, dim] tensor).
  MatrixView<T> at1(Index j) const { return MatrixView<T>(data_ + j * stride1_, d0_, d2_, stride0_); }

  /// Indices [first, first + count) of dimension 0.
  Tensor3View slice0(Index first, Index count) const {
    require(first >= 0 && count >= 0 && first + count <= d0_, "slice0", first,
            "range [" + std::to_string(first) + ", " + std::to_string(first + count) + ") must lie in [0, " +
                std::to_string(d0_) + ")");
    return Tensor3View(data_ + first * stride0_, count, d1_, d2_, stride0_, stride1_);
  }

 private:
  T* data_ = nullptr;
  Index d0_ = 0, d1_ = 0, d2_ = 0;
  Index stride0_ = 0, stride1_ = 0;
};

}  // namespace inferkit
