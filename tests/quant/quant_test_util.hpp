#pragma once
// Independent references for the quant/ tests: the quantization rules written out naively
// (double where it matters), fp64 products, and deterministic inputs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/quant/kernel_path.hpp"

namespace quant_test {

// Every kernel this build can run, then kAuto (the dispatcher's choice).
inline std::vector<inferkit::QuantKernel> kernels_and_auto() {
  auto k = inferkit::available_quant_kernels();
  k.push_back(inferkit::QuantKernel::kAuto);
  return k;
}

using inferkit::Index;

/// A rows x cols row-major matrix with its data.
struct Mat {
  Index rows = 0, cols = 0;
  std::vector<float> v;
  Mat(Index r, Index c, float fill = 0.0f) : rows(r), cols(c), v(static_cast<std::size_t>(r * c), fill) {}
  float& operator()(Index i, Index j) { return v[static_cast<std::size_t>(i * cols + j)]; }
  float operator()(Index i, Index j) const { return v[static_cast<std::size_t>(i * cols + j)]; }
  inferkit::MatrixView<const float> view() const { return {v.data(), rows, cols}; }
  inferkit::MatrixView<float> mut() { return {v.data(), rows, cols}; }
  const float* row(Index i) const { return v.data() + i * cols; }
};

inline Mat normal(Index rows, Index cols, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  Mat m(rows, cols);
  for (auto& x : m.v) x = nd(rng);
  return m;
}

/// Reference symmetric code: nearest integer (ties to even) of x / step, clamped.
inline int sym_code(float x, float step, int qmax) {
  if (step == 0.0f) return 0;
  const double q = std::nearbyint(static_cast<double>(x / step));  // the float quotient, as the rule says
  return static_cast<int>(std::clamp(q, -double(qmax), double(qmax)));
}

/// Reference per-row int8 quantization of a vector: (codes, scale).
struct Q8Row {
  std::vector<int> codes;
  float scale = 0;
};
inline Q8Row quantize_row(const float* x, Index n, float scale) {
  Q8Row r;
  r.scale = scale;
  for (Index i = 0; i < n; ++i) r.codes.push_back(sym_code(x[i], scale, 127));
  return r;
}
inline float amax(const float* x, Index n) {
  float m = 0;
  for (Index i = 0; i < n; ++i) m = std::max(m, std::abs(x[i]));
  return m;
}

/// Smallest binary16 >= v (v >= 0), by search over bit patterns (independent of the library's rule).
inline float f16_up(float v) {
  for (std::uint16_t b = 0; b < 0x7C00; ++b) {
    const float f = inferkit::to_float(inferkit::Float16{b});
    if (f >= v) return f;
  }
  return std::numeric_limits<float>::infinity();
}
/// Largest binary16 <= v.
inline float f16_down(float v) {
  if (v >= 0) {
    float best = 0;
    for (std::uint16_t b = 0; b < 0x7C00; ++b) {
      const float f = inferkit::to_float(inferkit::Float16{b});
      if (f <= v)
        best = f;
      else
        break;
    }
    return best;
  }
  return -f16_up(-v);
}

/// fp64 product Y = X W^T of float matrices.
inline std::vector<double> product(const Mat& x, const Mat& w) {
  std::vector<double> y(static_cast<std::size_t>(x.rows * w.rows), 0.0);
  for (Index m = 0; m < x.rows; ++m)
    for (Index n = 0; n < w.rows; ++n) {
      double s = 0;
      for (Index k = 0; k < x.cols; ++k) s += double(x(m, k)) * double(w(n, k));
      y[static_cast<std::size_t>(m * w.rows + n)] = s;
    }
  return y;
}

/// Relative Frobenius error of y against ref.
inline double rel_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// Unit roundoff of float.
inline constexpr double kEps = 0x1p-24;

}  // namespace quant_test
