#include <catch2/catch.hpp>

#include <cmath>

#include "inferkit/quant/matmul.hpp"
#include "quant_test_util.hpp"

using quant_test::kEps;
using quant_test::Mat;

namespace {

// The W8A8 result written out: activation codes from the reference rule (outlier columns set
// to zero and left out of the scale), exact integer sums, the float epilogue, then the
// outlier columns' fp32 contributions in ascending order.
std::vector<float> reference_w8a8(const Mat& x, const inferkit::Int8Weights& w, bool per_tensor,
                                  const std::vector<long>& outliers, const Mat* wf,
                                  std::vector<double>* magnitude = nullptr) {
  const long M = x.rows, K = x.cols, N = w.rows();
  Mat kept = x;
  for (long m = 0; m < M; ++m)
    for (long k : outliers) kept(m, k) = 0.0f;
  std::vector<float> s(static_cast<std::size_t>(M));
  for (long m = 0; m < M; ++m) s[static_cast<std::size_t>(m)] = quant_test::amax(kept.row(m), K) / 127.0f;
  if (per_tensor) {
    const float mx = *std::max_element(s.begin(), s.end());
    std::fill(s.begin(), s.end(), mx);
  }
  std::vector<float> y(static_cast<std::size_t>(M * N));
  for (long m = 0; m < M; ++m) {
    const auto q = quant_test::quantize_row(kept.row(m), K, s[static_cast<std::size_t>(m)]);
    for (long n = 0; n < N; ++n) {
      long long acc = 0;
      for (long k = 0; k < K; ++k) acc += static_cast<long long>(q.codes[static_cast<std::size_t>(k)]) * w.code(n, k);
      float v = static_cast<float>(acc) * (s[static_cast<std::size_t>(m)] * w.scale(n));
      double mag = std::abs(v);
      for (long k : outliers) {
        const float wv = wf ? (*wf)(n, k) : w.dequantized(n, k);
        v = std::fma(x(m, k), wv, v);
        mag += std::abs(double(x(m, k)) * wv);
      }
      y[static_cast<std::size_t>(m * N + n)] = v;
      if (magnitude) magnitude->push_back(mag);
    }
  }
  return y;
}

// The outlier part fuses its multiply-adds where the build has FMA.
#if defined(__FMA__)
constexpr bool kFusedAxpy = true;
#else
constexpr bool kFusedAxpy = false;
#endif

// Exact where the build fuses the multiply-adds; otherwise within the rounding of the unfused
// products and sums (two roundings per term) of the outlier part.
void check_close(const std::vector<float>& y, const std::vector<float>& ref, const std::vector<double>& mag,
                 std::size_t terms, bool exact) {
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (exact)
      REQUIRE(y[i] == ref[i]);
    else
      REQUIRE(std::abs(double(y[i]) - ref[i]) <= 4.0 * (terms + 1) * kEps * mag[i]);
  }
}

}  // namespace

TEST_CASE("W8A8 matmul equals the written-out integer product on every path, tails included", "[quant][matmul]") {
  for (long M : {1L, 2L, 5L, 6L, 7L, 13L})
    for (auto [N, K] : {std::pair<long, long>{1, 1}, {17, 3}, {16, 64}, {70, 130}, {33, 257}}) {
      const Mat w = quant_test::normal(N, K, 21, 0.1f);
      Mat x = quant_test::normal(M, K, 22, 2.0f);
      if (M > 1)
        for (long k = 0; k < K; ++k) x(1, k) = 0.0f;  // a zero token
      const inferkit::Int8Weights q(w.view());
      for (bool per_tensor : {false, true}) {
        const auto ref = reference_w8a8(x, q, per_tensor, {}, nullptr);
        const auto exact = quant_test::product(x, w);
        for (auto k : quant_test::kernels_and_auto()) {
          INFO(M << " x " << N << " x " << K << (per_tensor ? " per-tensor" : " per-token") << " on "
                 << inferkit::quant_kernel_name(k));
          Mat y(M, N, -7.0f);
          const auto st = inferkit::matmul(
              x.view(), q, y.mut(),
              {.scale = per_tensor ? inferkit::ActivationScale::kPerTensor : inferkit::ActivationScale::kPerToken,
               .kernel = k});
          CHECK(st.outlier_columns == 0);
          REQUIRE(y.v == ref);
          // Semantics: the W8A8 error stays within half an activation step and half a weight step per term.
          for (long m = 0; m < M; ++m)
            for (long n = 0; n < N; ++n) {
              const float sx =
                  per_tensor ? quant_test::amax(x.v.data(), M * K) / 127.0f : quant_test::amax(x.row(m), K) / 127.0f;
              double bound = 0;
              for (long kk = 0; kk < K; ++kk)
                bound += 0.5 * sx * std::abs(w(n, kk)) + 0.5 * q.scale(n) * (std::abs(x(m, kk)) + 0.5 * sx);
              CHECK(std::abs(y(m, n) - exact[static_cast<std::size_t>(m * N + n)]) <= bound * (1 + 1e-4) + 1e-6);
            }
        }
      }
    }
}

TEST_CASE("LLM.int8 decomposition: outlier columns run in fp32 against float weights", "[quant][matmul][outliers]") {
  const long M = 9, N = 40, K = 96;
  const Mat w = quant_test::normal(N, K, 31, 0.1f);
  Mat x = quant_test::normal(M, K, 32, 1.0f);
  for (long m = 0; m < M; ++m) x(m, 17) *= 50.0f, x(m, 60) *= 50.0f;  // systematic outlier channels
  x(4, 90) = -6.0f;                                                   // on the threshold: an outlier (>=)
  x(2, 91) = 5.999f;                                                  // just below
  const inferkit::Int8Weights q(w.view());
  const std::vector<long> cols{17, 60, 90};
  const auto exact = quant_test::product(x, w);
  for (bool use_float : {true, false}) {
    std::vector<double> mag;
    const auto ref = reference_w8a8(x, q, false, cols, use_float ? &w : nullptr, &mag);
    for (auto k : quant_test::kernels_and_auto()) {
      INFO((use_float ? "float" : "dequantized") << " outlier weights on " << inferkit::quant_kernel_name(k));
      Mat y(M, N);
      inferkit::OutlierOptions o;
      if (use_float) o.float_weights = w.view();
      const auto st = inferkit::matmul(x.view(), q, y.mut(), {.outliers = o, .kernel = k});
      CHECK(st.outlier_columns == 3);
      check_close(y.v, ref, mag, cols.size(), kFusedAxpy);
    }
  }
  // The decomposition removes most of the error the outliers cause.
  Mat plain(M, N), split(M, N);
  inferkit::matmul(x.view(), q, plain.mut());
  inferkit::matmul(x.view(), q, split.mut(), {.outliers = inferkit::OutlierOptions{6.0f, w.view()}});
  CHECK(quant_test::rel_error(split.v, exact) < 0.25 * quant_test::rel_error(plain.v, exact));
}

TEST_CASE("LLM.int8 with every column an outlier is the fp32 product", "[quant][matmul][outliers]") {
  const long M = 3, N = 21, K = 10;
  const Mat w = quant_test::normal(N, K, 41, 1.0f);
  const Mat x = quant_test::normal(M, K, 42, 1.0f);
  const inferkit::Int8Weights q(w.view());
  const auto exact = quant_test::product(x, w);
  Mat y(M, N);
  const auto st = inferkit::matmul(x.view(), q, y.mut(), {.outliers = inferkit::OutlierOptions{1e-30f, w.view()}});
  CHECK(st.outlier_columns == K);
  for (long m = 0; m < M; ++m)
    for (long n = 0; n < N; ++n) {
      double mag = 0;
      for (long k = 0; k < K; ++k) mag += std::abs(double(x(m, k)) * w(n, k));
      CHECK(std::abs(y(m, n) - exact[static_cast<std::size_t>(m * N + n)]) <= (K + 2) * kEps * mag);
    }
}

TEST_CASE("W8A8 results do not depend on the thread count", "[quant][matmul][threads]") {
  // Large enough (over 2^22 multiply-adds) to run threaded.
  const Mat w = quant_test::normal(300, 410, 51, 0.1f);
  Mat x = quant_test::normal(37, 410, 52, 1.0f);
  for (long m = 0; m < 37; ++m) x(m, 5) = 30.0f;
  const inferkit::Int8Weights q(w.view());
  Mat a(37, 300), b(37, 300);
  const inferkit::MatmulOptions base{.outliers = inferkit::OutlierOptions{6.0f, w.view()}};
  auto o1 = base, o2 = base;
  o1.num_threads = 1;
  o2.num_threads = 2;
  inferkit::matmul(x.view(), q, a.mut(), o1);
  inferkit::matmul(x.view(), q, b.mut(), o2);
  CHECK(a.v == b.v);
}

TEST_CASE("W8A8 matmul rejects bad shapes, non-finite inputs and bad outlier options", "[quant][matmul][errors]") {
  const Mat w = quant_test::normal(8, 12, 61);
  const inferkit::Int8Weights q(w.view());
  Mat x = quant_test::normal(3, 12, 62), y(3, 8), bad_y(3, 7), bad_x(3, 11);
  CHECK_THROWS_WITH(inferkit::matmul(bad_x.view(), q, y.mut()), Catch::Contains("x.cols() = 11"));
  CHECK_THROWS_WITH(inferkit::matmul(x.view(), q, bad_y.mut()), Catch::Contains("y.cols() = 7"));
  Mat y2(2, 8);
  CHECK_THROWS_WITH(inferkit::matmul(x.view(), q, y2.mut()), Catch::Contains("y.rows() = 2"));
  CHECK_THROWS_WITH(inferkit::matmul(x.view(), q, y.mut(), {.outliers = inferkit::OutlierOptions{0.0f}}),
                    Catch::Contains("outliers.threshold = 0"));
  CHECK_THROWS_WITH(inferkit::matmul(x.view(), q, y.mut(), {.outliers = inferkit::OutlierOptions{NAN}}),
                    Catch::Contains("outliers.threshold = nan"));
  const Mat wrong(8, 11);
  CHECK_THROWS_WITH(inferkit::matmul(x.view(), q, y.mut(), {.outliers = inferkit::OutlierOptions{6.0f, wrong.view()}}),
                    Catch::Contains("outliers.float_weights.cols() = 11"));
  Mat wnan = w;
  x(1, 4) = 40.0f;
  wnan(6, 4) = NAN;
  CHECK_THROWS_WITH(inferkit::matmul(x.view(), q, y.mut(), {.outliers = inferkit::OutlierOptions{6.0f, wnan.view()}}),
                    Catch::Contains("outliers.float_weights(6, 4) = nan"));
  x(2, 7) = -INFINITY;
  CHECK_THROWS_WITH(inferkit::matmul(x.view(), q, y.mut()), Catch::Contains("x(2, 7) = -inf"));
}
