#pragma once
// W8A8 matrix products: Y = X W^T for a batch of activation rows X [M x K] and Int8Weights W
// [N x K], with X quantized to int8 on the fly and int32 accumulation (AVX-512 VNNI vpdpbusd,
// AVX2 vpmaddubsw, or scalar), optionally with the LLM.int8() outlier decomposition.
//
//   activation scale s_m = max_k |X[m, k]| / 127 per token (or one max over all of X per
//   tensor), codes q = round(X / s) in [-127, 127] (core/quant_rounding.hpp's symmetric rule);
//   Y[m, n] = float(sum_k q[m, k] * code[n, k]) * (s_m * scale_n)            (int32 sum, exact)
//
// LLM.int8() (Dettmers et al. 2022): with `outliers` set, a column k of X is an outlier when
// |X[m, k]| >= threshold for some row m (bitsandbytes' comparison; 6.0 in the paper). Outlier
// columns are left out of the int8 part (their codes are 0 and they do not enter s_m) and
// their contribution is added in fp32 against float weights:
//   Y[m, n] += X[m, k] * Wf[n, k]  for each outlier column k in ascending order (one
//   multiply-add each, fused where the build has FMA (__FMA__), on the int8 part's float result),
// where Wf is `OutlierOptions::float_weights` when given (the original float matrix), else the
// dequantized int8 weights (bitsandbytes' choice when it keeps no float copy). The outlier set
// is a property of the whole call: the same row in another batch can see other columns.
//
// Threads split output channels in fixed blocks of 64; every output element is computed by
// the same arithmetic whatever the thread count, and integer sums make every kernel path give
// bitwise the same result.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/activation_rows.hpp"
#include "inferkit/quant/detail/int8_kernels.hpp"
#include "inferkit/quant/detail/parallel.hpp"
#include "inferkit/quant/int8_weights.hpp"
#include "inferkit/quant/kernel_path.hpp"

namespace inferkit {

/// How activation scales are chosen.
enum class ActivationScale {
  kPerToken,   ///< one scale per row of X (dynamic, per token)
  kPerTensor,  ///< one scale for all of X
};

/// LLM.int8() outlier decomposition.
struct OutlierOptions {
  /// A column is an outlier when some |X[m, k]| >= threshold (must be finite and > 0).
  float threshold = 6.0f;
  /// Float weights for the outlier columns: the N x K matrix W was quantized from. Empty: use
  /// the dequantized int8 weights.
  MatrixView<const float> float_weights{};
};

/// Options of the W8A8 product.
struct MatmulOptions {
  ActivationScale scale = ActivationScale::kPerToken;  ///< per-token or per-tensor activation scales
  std::optional<OutlierOptions> outliers{};            ///< LLM.int8() decomposition when set
  int num_threads = 0;                                 ///< 0 = OpenMP's default
  QuantKernel kernel = QuantKernel::kAuto;             ///< instruction-set path
};

/// What one product did.
struct MatmulStats {
  Index outlier_columns = 0;  ///< columns run in fp32 by the LLM.int8() decomposition
};

/// Y = X W^T with X [M x K] float, W int8 [N x K], Y [M x N] float (may not alias X), in W8A8
/// with int32 accumulation (see the file comment for the exact arithmetic). Throws
/// std::invalid_argument naming the parameter for mismatched shapes, a NaN or infinite
/// activation (`x(row, col)`), a bad threshold, float weights of the wrong shape or with a
/// non-finite value in an outlier column, or a kernel path this build lacks. Thread-safe for
/// distinct outputs.
inline MatmulStats matmul(MatrixView<const float> x, const Int8Weights& w, MatrixView<float> y,
                          const MatmulOptions& options = {}) {
  const Index M = x.rows(), K = w.cols(), N = w.rows();
  require(x.cols() == K, "x.cols()", x.cols(), "must equal w.cols() (" + std::to_string(K) + ")");
  require(y.rows() == M, "y.rows()", y.rows(), "must equal x.rows() (" + std::to_string(M) + ")");
  require(y.cols() == N, "y.cols()", y.cols(), "must equal w.rows() (" + std::to_string(N) + ")");
  require_thread_count("num_threads", options.num_threads);
  const QuantKernel kernel = resolve_quant_kernel(options.kernel);
  if (options.outliers) {
    const OutlierOptions& o = *options.outliers;
    require(std::isfinite(o.threshold) && o.threshold > 0.0f, "outliers.threshold", o.threshold,
            "must be finite and > 0");
    if (o.float_weights.data() != nullptr) {
      require(o.float_weights.rows() == N, "outliers.float_weights.rows()", o.float_weights.rows(),
              "must equal w.rows() (" + std::to_string(N) + ")");
      require(o.float_weights.cols() == K, "outliers.float_weights.cols()", o.float_weights.cols(),
              "must equal w.cols() (" + std::to_string(K) + ")");
    }
  }
  detail::require_finite_rows(x, "x");
  MatmulStats stats;
  if (M == 0 || N == 0) return stats;

  // Outlier columns (ascending) and the kept-column mask.
  std::vector<Index> outlier_cols;
  if (options.outliers) {
    std::vector<float> colmax(static_cast<std::size_t>(K), 0.0f);
    for (Index m = 0; m < M; ++m) detail::max_abs_into(x.row_ptr(m), K, colmax.data());
    for (Index k = 0; k < K; ++k)
      if (colmax[static_cast<std::size_t>(k)] >= options.outliers->threshold) outlier_cols.push_back(k);
  }
  stats.outlier_columns = static_cast<Index>(outlier_cols.size());
  const bool split = !outlier_cols.empty();

  // Activation scales and codes.
  const Index Kp = w.padded_cols();
  const bool offset = detail::w8a8_unsigned_activations(kernel);
  AlignedBuffer<std::int8_t> xq(static_cast<std::size_t>(M * Kp));
  std::vector<float> xs(static_cast<std::size_t>(M));
  const int threads = resolve_threads(options.num_threads);
  {
    AlignedBuffer<float> kept(split ? static_cast<std::size_t>(M * K) : 0);
    const auto row_of = [&](Index m) -> const float* {
      if (!split) return x.row_ptr(m);
      float* r = kept.data() + m * K;
      std::copy_n(x.row_ptr(m), K, r);
      for (Index k : outlier_cols) r[k] = 0.0f;
      return r;
    };
    std::vector<const float*> rows(static_cast<std::size_t>(M));
    for (Index m = 0; m < M; ++m) {
      rows[static_cast<std::size_t>(m)] = row_of(m);
      xs[static_cast<std::size_t>(m)] = detail::abs_max(rows[static_cast<std::size_t>(m)], K) / 127.0f;
    }
    if (options.scale == ActivationScale::kPerTensor) {
      const float s = *std::max_element(xs.begin(), xs.end());
      std::fill(xs.begin(), xs.end(), s);
    }
    detail::parallel_items(M * K >= (Index{1} << 18) ? threads : 1, M, [&](Index m) {
      detail::quantize_row_int8(rows[static_cast<std::size_t>(m)], K, Kp, xs[static_cast<std::size_t>(m)], offset,
                                kernel, xq.data() + m * Kp);
    });
  }

  // Outlier operands: X[:, O] [M x |O|] and Wf[:, O]^T [|O| x N].
  const Index n_out = static_cast<Index>(outlier_cols.size());
  std::vector<float> xo, wo;
  if (split) {
    xo.resize(static_cast<std::size_t>(M * n_out));
    wo.resize(static_cast<std::size_t>(n_out * N));
    for (Index m = 0; m < M; ++m)
      for (Index j = 0; j < n_out; ++j)
        xo[static_cast<std::size_t>(m * n_out + j)] = x(m, outlier_cols[static_cast<std::size_t>(j)]);
    const MatrixView<const float> wf = options.outliers->float_weights;
    for (Index j = 0; j < n_out; ++j) {
      const Index k = outlier_cols[static_cast<std::size_t>(j)];
      for (Index n = 0; n < N; ++n) {
        const float v = wf.data() != nullptr ? wf(n, k) : w.dequantized(n, k);
        if (!std::isfinite(v))
          throw_invalid_argument("outliers.float_weights(" + std::to_string(n) + ", " + std::to_string(k) + ")", v,
                                 "must be finite");
        wo[static_cast<std::size_t>(j * N + n)] = v;
      }
    }
  }

  // Integer part by blocks of panels, then the fp32 outlier part of the same channels.
  const int tile_rows = detail::w8a8_tile_rows(kernel);
  const Index panels = w.panels(), per_unit = detail::kW8A8TilePanels;
  const Index units = (panels + per_unit - 1) / per_unit;
  const int work_threads = M * N * K >= (Index{1} << 22) ? threads : 1;  // below, a region costs more than it saves
  detail::parallel_items(work_threads, units, [&](Index u) {
    const Index p0 = u * per_unit, np = std::min(per_unit, panels - p0);
    const std::int8_t* xr[detail::kW8A8TileRows];
    float* yr[detail::kW8A8TileRows];
    for (Index m0 = 0; m0 < M; m0 += tile_rows) {
      const int rows = static_cast<int>(std::min<Index>(tile_rows, M - m0));
      for (int r = 0; r < rows; ++r) {
        xr[r] = xq.data() + (m0 + r) * Kp;
        yr[r] = y.row_ptr(m0 + r);
      }
      detail::w8a8_tile(kernel, w, {xr, xs.data() + m0, yr, rows, p0, np});
    }
    if (split)
      detail::add_outlier_part(y, xo.data(), wo.data(), n_out, N, p0 * Int8Weights::kPanel,
                               std::min(N, (p0 + np) * Int8Weights::kPanel));
  });
  return stats;
}

}  // namespace inferkit
