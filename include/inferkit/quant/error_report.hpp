#pragma once
// How much each quantization method changes a product: Y = X W^T through each method, against
// the fp64 product of the float inputs, as the relative Frobenius error ||Y - Y_64|| / ||Y_64||.
// Methods: weight-only int8 and int4 (float activations), int4 weights with Q8_0 activations
// (llama.cpp's road), W8A8 with one activation scale per tensor or per token, W8A8 with the
// LLM.int8() decomposition, and W8A8 (per token) after SmoothQuant.

#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/detail/parallel.hpp"
#include "inferkit/quant/int4_weights.hpp"
#include "inferkit/quant/int8_weights.hpp"
#include "inferkit/quant/matmul.hpp"
#include "inferkit/quant/matvec.hpp"
#include "inferkit/quant/smooth_quant.hpp"

namespace inferkit {

/// A quantization method of the error report.
enum class QuantMethod {
  kWeightInt8,       ///< int8 weights, float activations
  kWeightInt4,       ///< int4 weights (Int4Spec of the options), float activations
  kWeightInt4ActQ8,  ///< int4 weights, activations int8 per 32-block (llama.cpp's Q4 x Q8_0)
  kW8A8PerTensor,    ///< int8 weights, int8 activations with one scale for all of X
  kW8A8PerToken,     ///< int8 weights, int8 activations with one scale per row of X
  kLlmInt8,          ///< per-token W8A8 with the LLM.int8() outlier decomposition (float weights)
  kSmoothQuant,      ///< per-token W8A8 after SmoothQuant smoothing
};

/// Every method, in the order above.
inline constexpr QuantMethod kAllQuantMethods[] = {
    QuantMethod::kWeightInt8,   QuantMethod::kWeightInt4, QuantMethod::kWeightInt4ActQ8, QuantMethod::kW8A8PerTensor,
    QuantMethod::kW8A8PerToken, QuantMethod::kLlmInt8,    QuantMethod::kSmoothQuant};

/// Short name of a method ("int8", "int4", "int4_q8", "w8a8_tensor", "w8a8_token",
/// "llm_int8", "smoothquant").
inline const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::kWeightInt8:
      return "int8";
    case QuantMethod::kWeightInt4:
      return "int4";
    case QuantMethod::kWeightInt4ActQ8:
      return "int4_q8";
    case QuantMethod::kW8A8PerTensor:
      return "w8a8_tensor";
    case QuantMethod::kW8A8PerToken:
      return "w8a8_token";
    case QuantMethod::kLlmInt8:
      return "llm_int8";
    case QuantMethod::kSmoothQuant:
      return "smoothquant";
  }
  return "unknown";
}

/// Options of the error report.
struct ErrorReportOptions {
  Int4Spec int4{};                 ///< int4 format of the int4 methods
  float outlier_threshold = 6.0f;  ///< LLM.int8() threshold
  float smooth_alpha = 0.5f;       ///< SmoothQuant migration strength
  /// SmoothQuant's per-channel max |X| from calibration data; empty: taken from X itself.
  std::span<const float> calibration_abs_max{};
  int num_threads = 0;  ///< 0 = OpenMP's default
};

/// One method's result.
struct MethodError {
  QuantMethod method{};          ///< the method
  double relative_error = 0;     ///< ||Y - Y_64||_F / ||Y_64||_F (the absolute norm if Y_64 = 0)
  double reference_norm = 0;     ///< ||Y_64||_F, to pool errors over several products
  Index outlier_columns = 0;     ///< columns LLM.int8() ran in fp32 (that method only)
  std::size_t weight_bytes = 0;  ///< bytes of the quantized weights the method reads
};

/// The fp64 product Y_64 = X W^T, row-major [x.rows() x w.rows()], each element summed in
/// double over k in order. Throws std::invalid_argument naming `w.cols()` when it differs
/// from x.cols().
inline std::vector<double> reference_product(MatrixView<const float> x, MatrixView<const float> w,
                                             int num_threads = 0) {
  require_thread_count("num_threads", num_threads);
  require(w.cols() == x.cols(), "w.cols()", w.cols(), "must equal x.cols() (" + std::to_string(x.cols()) + ")");
  const Index M = x.rows(), N = w.rows(), K = x.cols();
  std::vector<double> y(static_cast<std::size_t>(M * N));
  detail::parallel_items(resolve_threads(num_threads), M, [&](Index m) {
    const float* xr = x.row_ptr(m);
    for (Index n = 0; n < N; ++n) {
      const float* wr = w.row_ptr(n);
      double s = 0;
      for (Index k = 0; k < K; ++k) s += double(xr[k]) * double(wr[k]);
      y[static_cast<std::size_t>(m * N + n)] = s;
    }
  });
  return y;
}

/// ||y - ref||_F / ||ref||_F for y [rows x cols] and ref row-major of the same shape (the
/// absolute norm when ref is all zero). Throws std::invalid_argument naming `ref.size()` for a
/// size mismatch.
inline double relative_error(MatrixView<const float> y, std::span<const double> ref) {
  require(static_cast<Index>(ref.size()) == y.rows() * y.cols(), "ref.size()", ref.size(),
          "must equal y.rows() * y.cols() (" + std::to_string(y.rows() * y.cols()) + ")");
  double num = 0, den = 0;
  for (Index m = 0; m < y.rows(); ++m)
    for (Index n = 0; n < y.cols(); ++n) {
      const double r = ref[static_cast<std::size_t>(m * y.cols() + n)], d = double(y(m, n)) - r;
      num += d * d;
      den += r * r;
    }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// Runs every method in `methods` on Y = X W^T (X [M x K], W [N x K], both float) and reports
/// its relative error against the fp64 product. Throws std::invalid_argument for mismatched
/// shapes, non-finite inputs (named as by the products) or bad options.
inline std::vector<MethodError> quantization_error_report(MatrixView<const float> x, MatrixView<const float> w,
                                                          const ErrorReportOptions& options = {},
                                                          std::span<const QuantMethod> methods = kAllQuantMethods) {
  const auto ref = reference_product(x, w, options.num_threads);
  double ref_norm = 0;
  for (double r : ref) ref_norm += r * r;
  ref_norm = std::sqrt(ref_norm);
  const Index M = x.rows(), N = w.rows(), K = x.cols();
  std::vector<float> y(static_cast<std::size_t>(M * N));
  const MatrixView<float> yv(y.data(), M, N);
  std::vector<MethodError> out;
  std::optional<Int8Weights> q8;
  std::optional<Int4Weights> q4;
  const auto int8 = [&]() -> const Int8Weights& { return q8 ? *q8 : q8.emplace(w); };
  const auto int4 = [&]() -> const Int4Weights& { return q4 ? *q4 : q4.emplace(w, options.int4); };
  for (QuantMethod m : methods) {
    MethodError e;
    e.method = m;
    switch (m) {
      case QuantMethod::kWeightInt8:
      case QuantMethod::kWeightInt4:
      case QuantMethod::kWeightInt4ActQ8: {
        const MatvecOptions mo{
            .activations = m == QuantMethod::kWeightInt4ActQ8 ? ActivationFormat::kInt8 : ActivationFormat::kFloat,
            .num_threads = options.num_threads};
        for (Index r = 0; r < M; ++r) {
          const std::span<const float> xr(x.row_ptr(r), static_cast<std::size_t>(K));
          const std::span<float> yr(y.data() + r * N, static_cast<std::size_t>(N));
          if (m == QuantMethod::kWeightInt8)
            matvec(int8(), xr, yr, mo);
          else
            matvec(int4(), xr, yr, mo);
        }
        e.weight_bytes = m == QuantMethod::kWeightInt8 ? int8().bytes() : int4().bytes();
        break;
      }
      case QuantMethod::kW8A8PerTensor:
      case QuantMethod::kW8A8PerToken:
        matmul(x, int8(), yv,
               {.scale = m == QuantMethod::kW8A8PerTensor ? ActivationScale::kPerTensor : ActivationScale::kPerToken,
                .num_threads = options.num_threads});
        e.weight_bytes = int8().bytes();
        break;
      case QuantMethod::kLlmInt8:
        e.outlier_columns =
            matmul(x, int8(), yv,
                   {.outliers = OutlierOptions{options.outlier_threshold, w}, .num_threads = options.num_threads})
                .outlier_columns;
        e.weight_bytes = int8().bytes();
        break;
      case QuantMethod::kSmoothQuant: {
        std::vector<float> act;
        if (options.calibration_abs_max.empty()) {
          ActivationStats stats(K);
          stats.observe(x);
          act.assign(stats.abs_max().begin(), stats.abs_max().end());
        } else {
          require(static_cast<Index>(options.calibration_abs_max.size()) == K, "calibration_abs_max.size()",
                  options.calibration_abs_max.size(), "must equal x.cols() (" + std::to_string(K) + ")");
          act.assign(options.calibration_abs_max.begin(), options.calibration_abs_max.end());
        }
        std::vector<float> wmax(static_cast<std::size_t>(K), 0.0f);
        weight_column_abs_max(w, wmax);
        const std::vector<float> s = smoothing_factors(act, wmax, options.smooth_alpha);
        // X / s and W * s explicitly (a model folds them into its norm and weights instead).
        std::vector<float> xs(static_cast<std::size_t>(M * K)), ws(static_cast<std::size_t>(N * K));
        for (Index r = 0; r < M; ++r)
          for (Index k = 0; k < K; ++k)
            xs[static_cast<std::size_t>(r * K + k)] = x(r, k) / s[static_cast<std::size_t>(k)];
        for (Index n = 0; n < N; ++n)
          for (Index k = 0; k < K; ++k)
            ws[static_cast<std::size_t>(n * K + k)] = w(n, k) * s[static_cast<std::size_t>(k)];
        const Int8Weights qs(MatrixView<const float>(ws.data(), N, K));
        matmul(MatrixView<const float>(xs.data(), M, K), qs, yv, {.num_threads = options.num_threads});
        e.weight_bytes = qs.bytes();
        break;
      }
    }
    e.relative_error = relative_error(yv, ref);
    e.reference_norm = ref_norm;
    out.push_back(e);
  }
  return out;
}

}  // namespace inferkit
