#include <catch2/catch.hpp>

#include <cmath>

#include "inferkit/quant/smooth_quant.hpp"
#include "quant_test_util.hpp"

using quant_test::Mat;

TEST_CASE("activation statistics keep per-channel max |x| over a stream", "[quant][smooth]") {
  inferkit::ActivationStats st(5);
  Mat a = quant_test::normal(7, 5, 1), b = quant_test::normal(3, 5, 2, 4.0f);
  st.observe(a.view());
  st.observe(std::span<const float>(b.row(0), 5));
  st.observe(inferkit::MatrixView<const float>(b.row(1), 2, 5));
  CHECK(st.rows_seen() == 10);
  for (long j = 0; j < 5; ++j) {
    float m = 0;
    for (long r = 0; r < 7; ++r) m = std::max(m, std::abs(a(r, j)));
    for (long r = 0; r < 3; ++r) m = std::max(m, std::abs(b(r, j)));
    CHECK(st.abs_max()[static_cast<std::size_t>(j)] == m);
  }
  Mat bad(2, 5);
  bad(1, 3) = NAN;
  CHECK_THROWS_WITH(st.observe(bad.view()), Catch::Contains("x(1, 3) = nan"));
  CHECK(st.rows_seen() == 10);
  CHECK_THROWS_WITH(st.observe(Mat(1, 4).view()), Catch::Contains("x.cols() = 4"));
  CHECK_THROWS_WITH(inferkit::ActivationStats(-1), Catch::Contains("channels = -1"));
}

TEST_CASE("smoothing factors follow s = a^alpha / w^(1 - alpha)", "[quant][smooth]") {
  const std::vector<float> act{4.0f, 0.0f, 100.0f, 0.25f, 3.0f}, wmax{1.0f, 2.0f, 0.01f, 0.0f, 3.0f};
  for (float alpha : {0.0f, 0.5f, 0.8f, 1.0f}) {
    const auto s = inferkit::smoothing_factors(act, wmax, alpha);
    for (std::size_t j = 0; j < act.size(); ++j) {
      INFO("alpha " << alpha << " channel " << j);
      if (act[j] == 0 || wmax[j] == 0) {
        CHECK(s[j] == 1.0f);
      } else {
        const double e = std::pow(double(act[j]), alpha) / std::pow(double(wmax[j]), 1.0 - alpha);
        CHECK(std::abs(s[j] - e) <= 1e-7 * e);
      }
    }
  }
  // alpha = 0.5 balances the migrated maxima: max|X_j| / s_j == max|W_j| * s_j.
  const auto s = inferkit::smoothing_factors(act, wmax, 0.5f);
  CHECK(act[2] / s[2] == Approx(wmax[2] * s[2]).epsilon(1e-6));
  CHECK_THROWS_WITH(inferkit::smoothing_factors(act, wmax, 1.5f), Catch::Contains("alpha = 1.5"));
  CHECK_THROWS_WITH(inferkit::smoothing_factors(act, std::vector<float>(4, 1.0f), 0.5f),
                    Catch::Contains("weight_abs_max.size() = 4"));
  std::vector<float> neg = act;
  neg[3] = -1.0f;
  CHECK_THROWS_WITH(inferkit::smoothing_factors(neg, wmax, 0.5f), Catch::Contains("act_abs_max[3] = -1"));
  CHECK_THROWS_WITH(inferkit::smoothing_factors(std::vector<float>{1.0f}, std::vector<float>{1e-45f}, 0.0f),
                    Catch::Contains("s[0]"));
}

TEST_CASE("folding smoothing into the norm and the weights leaves the float block unchanged", "[quant][smooth]") {
  // RMSNorm(x) * g feeds W1 and W3 (a Llama FFN input); x carries outlier channels.
  const long T = 6, D = 40, H = 24;
  Mat x = quant_test::normal(T, D, 3);
  for (long t = 0; t < T; ++t) x(t, 5) *= 60.0f, x(t, 33) *= 40.0f;
  Mat g = quant_test::normal(1, D, 4, 0.3f), w1 = quant_test::normal(H, D, 5, 0.1f),
      w3 = quant_test::normal(H, D, 6, 0.1f);
  for (auto& v : g.v) v = 1.0f + v;
  const auto block = [&](const Mat& gain, const Mat& a, const Mat& b) {
    Mat xn(T, D), out(T, 2 * H);
    for (long t = 0; t < T; ++t) {
      double ss = 0;
      for (long j = 0; j < D; ++j) ss += double(x(t, j)) * x(t, j);
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / D + 1e-5));
      for (long j = 0; j < D; ++j) xn(t, j) = gain.v[static_cast<std::size_t>(j)] * (x(t, j) * inv);
    }
    for (long t = 0; t < T; ++t)
      for (long n = 0; n < H; ++n) {
        float s1 = 0, s3 = 0;
        for (long j = 0; j < D; ++j) s1 += a(n, j) * xn(t, j), s3 += b(n, j) * xn(t, j);
        out(t, n) = s1;
        out(t, H + n) = s3;
      }
    return std::pair{out, xn};
  };
  const auto [before, xn] = block(g, w1, w3);
  inferkit::ActivationStats st(D);
  st.observe(xn.view());
  std::vector<float> wmax(static_cast<std::size_t>(D), 0.0f);
  inferkit::weight_column_abs_max(w1.view(), wmax);
  inferkit::weight_column_abs_max(w3.view(), wmax);
  for (long j = 0; j < D; ++j) {
    float m = 0;
    for (long n = 0; n < H; ++n) m = std::max({m, std::abs(w1(n, j)), std::abs(w3(n, j))});
    REQUIRE(wmax[static_cast<std::size_t>(j)] == m);
  }
  const auto s = inferkit::smoothing_factors(st.abs_max(), wmax, 0.5f);
  Mat g2 = g, a2 = w1, b2 = w3;
  const inferkit::MatrixView<float> ws[] = {a2.mut(), b2.mut()};
  inferkit::fold_smoothing(s, g2.v, ws);
  const auto [after, xn2] = block(g2, a2, b2);
  double mag = 0;
  for (float v : before.v) mag = std::max(mag, double(std::abs(v)));
  for (std::size_t i = 0; i < before.v.size(); ++i) CHECK(std::abs(after.v[i] - before.v[i]) <= 2e-5 * mag);
  // The smoothed activations are flatter: the outlier channel's max drops to the balance point.
  inferkit::ActivationStats st2(D);
  st2.observe(xn2.view());
  CHECK(st2.abs_max()[5] < 0.5f * st.abs_max()[5]);
  // Bad input changes nothing.
  std::vector<float> bad = s;
  bad[2] = 0.0f;
  const Mat g_kept = g2, a_kept = a2;
  CHECK_THROWS_WITH(inferkit::fold_smoothing(bad, g2.v, ws), Catch::Contains("s[2] = 0"));
  CHECK(g2.v == g_kept.v);
  CHECK(a2.v == a_kept.v);
  Mat narrow(3, D - 1);
  const inferkit::MatrixView<float> wbad[] = {narrow.mut()};
  CHECK_THROWS_WITH(inferkit::fold_smoothing(s, g2.v, wbad), Catch::Contains("weights[0].cols() = 39"));
  CHECK_THROWS_WITH(inferkit::weight_column_abs_max(w1.view(), std::span<float>(wmax.data(), 3)),
                    Catch::Contains("inout.size() = 3"));
}
