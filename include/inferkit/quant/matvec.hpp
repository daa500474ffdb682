#pragma once
// Matrix-vector products with quantized weights, for decode (one activation row): y = W x.
//
// Float activations (ActivationFormat::kFloat): codes are dequantized in registers and
// multiplied by the float x, accumulating in float:
//   Int8Weights: y_n = scale_n * sum_k code[n, k] x_k
//   Int4Weights: y_n = sum_g step_g sum_{k in g} code_k x_k + sum_g zero_g sum_{k in g} x_k
// (the same value as sum_k dequantized(n, k) x_k up to float rounding).
//
// Int8 activations (ActivationFormat::kInt8): x is quantized with the symmetric int8 rule and
// the products run on integer dot products:
//   Int8Weights: one scale for the whole of x (W8A8, exactly matmul() on a one-row X);
//   Int4Weights: one scale per block of 32 features (llama.cpp's Q4 x Q8_0 road), block sums
//   in int32, then y_n = sum_b step_g(b) d_b P_b + sum_b zero_g(b) d_b Q_b (int4_kernels.hpp).
// Dequantizing int4 to float costs more arithmetic per weight than the bytes it saves; the
// int8 road replaces it by one integer multiply-add per byte.
//
// Threads split output rows in fixed blocks; each y_n is computed by the same arithmetic
// whatever the thread count. Float sums are ordered by the kernel path (AVX-512, AVX2 or
// scalar), so float-activation results differ across paths by rounding only.

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/activation_rows.hpp"
#include "inferkit/quant/detail/int4_kernels.hpp"
#include "inferkit/quant/detail/int8_kernels.hpp"
#include "inferkit/quant/detail/parallel.hpp"
#include "inferkit/quant/int4_weights.hpp"
#include "inferkit/quant/int8_weights.hpp"
#include "inferkit/quant/kernel_path.hpp"
#include "inferkit/quant/matmul.hpp"

namespace inferkit {

/// How a matrix-vector product treats its activations.
enum class ActivationFormat {
  kFloat,  ///< float activations, weights dequantized in registers
  kInt8,   ///< activations quantized to int8 (per vector for int8 weights, per 32-block for int4)
};

/// Options of a quantized matrix-vector product.
struct MatvecOptions {
  ActivationFormat activations = ActivationFormat::kFloat;  ///< float or int8 activations
  int num_threads = 0;                                      ///< 0 = OpenMP's default
  QuantKernel kernel = QuantKernel::kAuto;                  ///< instruction-set path
};

namespace detail {

inline void check_matvec_shapes(Index rows, Index cols, std::span<const float> x, std::span<float> y) {
  require(static_cast<Index>(x.size()) == cols, "x.size()", x.size(),
          "must equal w.cols() (" + std::to_string(cols) + ")");
  require(static_cast<Index>(y.size()) == rows, "y.size()", y.size(),
          "must equal w.rows() (" + std::to_string(rows) + ")");
}

/// Threads for a product over `work` weights: one below 2^20 weights (about 20 us of work on
/// one core; an OpenMP fork and join costs a few microseconds, as much as a 288 x 288 product).
inline int matvec_threads(int requested, Index work) {
  require_thread_count("num_threads", requested);
  return work < (Index{1} << 20) ? 1 : resolve_threads(requested);
}

}  // namespace detail

/// y = W x with int8 weights (see the file comment for both activation forms). Throws
/// std::invalid_argument naming `x.size()` or `y.size()` for a shape mismatch, `x[i]` for a NaN
/// or infinite activation, or the kernel path. `y` must not alias `x`.
inline void matvec(const Int8Weights& w, std::span<const float> x, std::span<float> y,
                   const MatvecOptions& options = {}) {
  detail::check_matvec_shapes(w.rows(), w.cols(), x, y);
  if (options.activations == ActivationFormat::kInt8) {
    matmul(MatrixView<const float>(x.data(), 1, w.cols()), w, MatrixView<float>(y.data(), 1, w.rows()),
           {.scale = ActivationScale::kPerToken, .num_threads = options.num_threads, .kernel = options.kernel});
    return;
  }
  const QuantKernel kernel = resolve_quant_kernel(options.kernel);
  detail::require_finite_span(x, "x");
  const float* xs = x.data();  // the kernels read padded_cols features: pad a copy if needed
  AlignedBuffer<float> xp;
  if (w.padded_cols() != w.cols()) {
    xp.resize(static_cast<std::size_t>(w.padded_cols()));
    std::copy(x.begin(), x.end(), xp.data());
    std::fill(xp.data() + w.cols(), xp.data() + w.padded_cols(), 0.0f);
    xs = xp.data();
  }
  constexpr Index kPanelsPerBlock = 4;
  const Index panels = w.panels(), blocks = (panels + kPanelsPerBlock - 1) / kPanelsPerBlock;
  detail::parallel_items(detail::matvec_threads(options.num_threads, w.rows() * w.cols()), blocks, [&](Index b) {
    const Index p0 = b * kPanelsPerBlock;
    detail::int8_matvec_panels(kernel, w, xs, p0, std::min(kPanelsPerBlock, panels - p0), y.data());
  });
}

/// y = W x with int4 weights (see the file comment for both activation forms). Throws
/// std::invalid_argument naming `x.size()` or `y.size()` for a shape mismatch, `x[i]` for a NaN
/// or infinite activation, or the kernel path. `y` must not alias `x`.
inline void matvec(const Int4Weights& w, std::span<const float> x, std::span<float> y,
                   const MatvecOptions& options = {}) {
  detail::check_matvec_shapes(w.rows(), w.cols(), x, y);
  const QuantKernel kernel = resolve_quant_kernel(options.kernel);
  detail::require_finite_span(x, "x");
  const Index K = w.cols(), Kp = w.padded_cols(), N = w.rows();
  const int threads = detail::matvec_threads(options.num_threads, N * K);
  constexpr Index kRowsPerBlock = 16;
  const Index blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  const auto make_scratch = [&] { return detail::Int4Scratch(w); };
  // Rows [b * kRowsPerBlock, ...) in kernel calls of kInt4Rows rows.
  const auto rows_of_block = [&](Index b, const auto& run) {
    for (Index n = b * kRowsPerBlock; n < std::min(N, (b + 1) * kRowsPerBlock); n += detail::kInt4Rows)
      run(n, static_cast<int>(std::min<Index>(detail::kInt4Rows, N - n)));
  };
  if (options.activations == ActivationFormat::kFloat) {
    const float* xs = x.data();  // the kernels read padded_cols features: pad a copy if needed
    AlignedBuffer<float> xp;
    if (Kp != K) {
      xp.resize(static_cast<std::size_t>(Kp));
      std::copy(x.begin(), x.end(), xp.data());
      std::fill(xp.data() + K, xp.data() + Kp, 0.0f);
      xs = xp.data();
    }
    const Index G = w.spec().group_size;
    std::vector<float> gsum(static_cast<std::size_t>(w.groups_per_row()));
    for (Index g = 0; g < w.groups_per_row(); ++g)
      gsum[static_cast<std::size_t>(g)] = simd::sum_of(xs + g * G, static_cast<std::size_t>(std::min(G, K - g * G)));
    const detail::Int4FloatInput in{xs, gsum.data()};
    detail::parallel_items_with(threads, blocks, make_scratch, [&](detail::Int4Scratch& scratch, Index b) {
      rows_of_block(b,
                    [&](Index n, int rows) { detail::int4_rows_float(kernel, w, n, rows, in, scratch, y.data() + n); });
    });
    return;
  }
  // int8 activations per block of 32 (llama.cpp's Q8_0).
  const Index nb = Kp / detail::kQ8Block;
  AlignedBuffer<std::int8_t> q(static_cast<std::size_t>(Kp));
  const Index per = w.spec().group_size / detail::kQ8Block;
  std::vector<float> d(static_cast<std::size_t>(nb)), dqg(static_cast<std::size_t>(w.groups_per_row()), 0.0f);
  std::vector<std::int32_t> qsum(static_cast<std::size_t>(nb));
  detail::quantize_blocks_q8(x.data(), K, Kp, kernel, q.data(), d.data(), qsum.data());
  detail::int4_q8_order(kernel, q.data(), Kp);
  for (Index b = 0; b < K / detail::kQ8Block + (K % detail::kQ8Block != 0); ++b)  // blocks holding features
    dqg[static_cast<std::size_t>(b / per)] +=
        d[static_cast<std::size_t>(b)] * static_cast<float>(qsum[static_cast<std::size_t>(b)]);
  const detail::Int4Q8Input in{q.data(), d.data(), dqg.data()};
  detail::parallel_items_with(threads, blocks, make_scratch, [&](detail::Int4Scratch& scratch, Index b) {
    rows_of_block(b, [&](Index n, int rows) { detail::int4_rows_q8(kernel, w, n, rows, in, scratch, y.data() + n); });
  });
}

}  // namespace inferkit
