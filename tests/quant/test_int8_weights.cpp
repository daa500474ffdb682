#include <catch2/catch.hpp>

#include <cmath>

#include "inferkit/quant/int8_weights.hpp"
#include "quant_test_util.hpp"

using quant_test::Mat;

TEST_CASE("int8 weights: per-channel scale and codes follow the symmetric rule", "[quant][int8]") {
  for (auto [rows, cols] : {std::pair<long, long>{1, 1}, {5, 7}, {16, 64}, {33, 130}, {17, 3}}) {
    Mat w = quant_test::normal(rows, cols, 7, 0.5f);
    if (rows > 2) {
      for (long k = 0; k < cols; ++k) w(1, k) = 0.0f;   // an all-zero channel
      for (long k = 0; k < cols; ++k) w(2, k) = -3.5f;  // a constant channel
    }
    const inferkit::Int8Weights q(w.view());
    INFO(rows << " x " << cols);
    CHECK(q.rows() == rows);
    CHECK(q.cols() == cols);
    CHECK(q.padded_rows() == (rows + 15) / 16 * 16);
    CHECK(q.padded_cols() == (cols + 3) / 4 * 4);
    CHECK(q.bytes() == static_cast<std::size_t>(q.padded_rows() * q.padded_cols() + 8 * q.padded_rows()));
    for (long n = 0; n < rows; ++n) {
      const float scale = quant_test::amax(w.row(n), cols) / 127.0f;
      REQUIRE(q.scale(n) == scale);
      long sum = 0;
      for (long k = 0; k < cols; ++k) {
        const int c = quant_test::sym_code(w(n, k), scale, 127);
        REQUIRE(q.code(n, k) == c);
        sum += c;
        // Within half a step of the float weight (plus float rounding of code * scale).
        CHECK(std::abs(double(q.dequantized(n, k)) - w(n, k)) <= 0.5 * scale * (1 + 1e-6) + 1e-30);
      }
      CHECK(q.code_sums()[n] == sum);
    }
    // Padding: zero codes, zero scales.
    for (long n = rows; n < q.padded_rows(); ++n) CHECK(q.scales()[n] == 0.0f);
    for (long n = 0; n < q.padded_rows(); ++n)
      for (long k = (n < rows ? cols : 0); k < q.padded_cols(); ++k) CHECK(q.code(n, k) == 0);
  }
}

TEST_CASE("int8 weights: panel layout puts 16 channels x 4 features per 64 bytes", "[quant][int8]") {
  Mat w(32, 8);
  for (long n = 0; n < 32; ++n)
    for (long k = 0; k < 8; ++k) w(n, k) = static_cast<float>((n * 8 + k) % 127 - 63);
  w(0, 0) = 127.0f;  // scale 1 for row 0
  const inferkit::Int8Weights q(w.view());
  // Panel 1, quad 1, channel 3, feature 2 -> W[19, 6].
  const std::int8_t* p = q.panel(1);
  CHECK(p[1 * 64 + 3 * 4 + 2] == q.code(19, 6));
  CHECK(q.code(0, 0) == 127);
}

TEST_CASE("int8 weights: NaN, infinity and too many columns are rejected", "[quant][int8][errors]") {
  Mat w(3, 5, 1.0f);
  w(2, 4) = std::nanf("");
  CHECK_THROWS_WITH(inferkit::Int8Weights(w.view()), Catch::Contains("w(2, 4) = nan"));
  w(2, 4) = -INFINITY;
  CHECK_THROWS_AS(inferkit::Int8Weights(w.view()), std::invalid_argument);
  std::vector<float> wide(65537, 1.0f);
  CHECK_THROWS_WITH(inferkit::Int8Weights(inferkit::MatrixView<const float>(wide.data(), 1, 65537)),
                    Catch::Contains("w.cols() = 65537"));
  const inferkit::Int8Weights empty(inferkit::MatrixView<const float>(nullptr, 0, 0));
  CHECK(empty.bytes() == 0);
}
