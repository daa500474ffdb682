#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "inferkit/quant/error_report.hpp"
#include "quant_test_util.hpp"

using quant_test::Mat;

TEST_CASE("reference product and relative error", "[quant][report]") {
  const Mat x = quant_test::normal(5, 33, 1), w = quant_test::normal(7, 33, 2);
  const auto ref = inferkit::reference_product(x.view(), w.view());
  CHECK(ref == quant_test::product(x, w));
  Mat y(5, 7);
  for (long i = 0; i < 35; ++i) y.v[static_cast<std::size_t>(i)] = static_cast<float>(ref[static_cast<std::size_t>(i)]);
  CHECK(inferkit::relative_error(y.view(), ref) < 1e-7);
  y.v[3] += 1.0f;
  double den = 0;
  for (double r : ref) den += r * r;
  CHECK(inferkit::relative_error(y.view(), ref) == Approx(1.0 / std::sqrt(den)).epsilon(1e-5));
  CHECK_THROWS_WITH(inferkit::reference_product(x.view(), Mat(2, 4).view()), Catch::Contains("w.cols() = 4"));
  CHECK_THROWS_WITH(inferkit::relative_error(y.view(), std::vector<double>(3)), Catch::Contains("ref.size() = 3"));
}

TEST_CASE("error report on activations with outlier channels ranks the methods as the papers do", "[quant][report]") {
  const long M = 48, K = 256, N = 96;
  Mat x = quant_test::normal(M, K, 3);
  for (long m = 0; m < M; ++m)
    for (long c : {3, 40, 77, 130, 200, 251}) x(m, c) *= 50.0f;  // 6 outlier channels
  const Mat w = quant_test::normal(N, K, 4, 0.05f);
  const auto rep = inferkit::quantization_error_report(x.view(), w.view());
  REQUIRE(rep.size() == std::size(inferkit::kAllQuantMethods));
  std::map<inferkit::QuantMethod, double> err;
  for (const auto& e : rep) {
    INFO(inferkit::quant_method_name(e.method) << " " << e.relative_error);
    CHECK(e.relative_error > 0);
    CHECK(e.relative_error < 0.5);
    err[e.method] = e.relative_error;
  }
  using M_ = inferkit::QuantMethod;
  CHECK(err[M_::kW8A8PerToken] <= err[M_::kW8A8PerTensor]);
  CHECK(err[M_::kLlmInt8] < 0.5 * err[M_::kW8A8PerToken]);
  CHECK(err[M_::kSmoothQuant] < err[M_::kW8A8PerToken]);
  CHECK(err[M_::kWeightInt8] < err[M_::kW8A8PerToken]);
  CHECK(err[M_::kWeightInt8] < err[M_::kWeightInt4]);
  CHECK(rep[5].outlier_columns == 6);
  CHECK(rep[0].weight_bytes == inferkit::Int8Weights(w.view()).bytes());
  CHECK(rep[1].weight_bytes == inferkit::Int4Weights(w.view()).bytes());
  // Each entry is the error of the primitive run directly.
  const inferkit::Int8Weights q(w.view());
  Mat y(M, N);
  inferkit::matmul(x.view(), q, y.mut());
  CHECK(err[M_::kW8A8PerToken] == inferkit::relative_error(y.view(), quant_test::product(x, w)));
}

TEST_CASE("error report: SmoothQuant with calibration statistics from another batch", "[quant][report]") {
  const long K = 64;
  Mat calib = quant_test::normal(32, K, 5), x = quant_test::normal(8, K, 6);
  for (long m = 0; m < 32; ++m) calib(m, 9) *= 30.0f;
  for (long m = 0; m < 8; ++m) x(m, 9) *= 30.0f;
  const Mat w = quant_test::normal(16, K, 7, 0.1f);
  inferkit::ActivationStats st(K);
  st.observe(calib.view());
  const inferkit::QuantMethod only[] = {inferkit::QuantMethod::kSmoothQuant, inferkit::QuantMethod::kW8A8PerToken};
  const auto rep = inferkit::quantization_error_report(x.view(), w.view(), {.calibration_abs_max = st.abs_max()}, only);
  REQUIRE(rep.size() == 2);
  CHECK(rep[0].relative_error < rep[1].relative_error);
  CHECK_THROWS_WITH(
      inferkit::quantization_error_report(
          x.view(), w.view(), {.calibration_abs_max = std::span<const float>(st.abs_max().data(), 3)}, only),
      Catch::Contains("calibration_abs_max.size() = 3"));
}
