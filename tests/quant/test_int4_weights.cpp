#include <catch2/catch.hpp>

#include <cmath>

#include "inferkit/quant/int4_weights.hpp"
#include "quant_test_util.hpp"

using quant_test::Mat;

namespace {
// The reference rule for one group: (step, zero, codes).
struct Group {
  float step = 0, zero = 0;
  std::vector<int> codes;
};
Group reference_group(const float* x, long n, bool sym) {
  Group g;
  float lo = INFINITY, hi = -INFINITY, am = 0;
  for (long i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    am = std::max(am, std::abs(x[i]));
  }
  if (sym) {
    g.step = quant_test::f16_up(am / 7.0f);
    g.zero = -8.0f * g.step;
    for (long i = 0; i < n; ++i) g.codes.push_back(quant_test::sym_code(x[i], g.step, 7) + 8);
  } else {
    g.zero = quant_test::f16_down(lo);
    g.step = quant_test::f16_up((hi - g.zero) / 15.0f);
    for (long i = 0; i < n; ++i) {
      const int c = g.step == 0 ? 0 : static_cast<int>(std::nearbyint((x[i] - g.zero) / g.step));
      g.codes.push_back(std::clamp(c, 0, 15));
    }
  }
  return g;
}
}  // namespace

TEST_CASE("int4 weights: groups follow the KV codecs' rounding rules, tails included", "[quant][int4]") {
  for (long gs : {32L, 64L})
    for (bool sym : {true, false})
      for (auto [rows, cols] : {std::pair<long, long>{3, 64}, {2, 100}, {4, 31}, {1, 200}, {5, 1}}) {
        Mat w = quant_test::normal(rows, cols, 11, 0.3f);
        if (cols >= 40) {
          for (long k = 0; k < 32; ++k) w(0, k) = 0.0f;         // a zero group
          for (long k = 0; k < 32; ++k) w(1 % rows, k) = 0.7f;  // a constant group
        }
        w(rows - 1, cols - 1) = 900.0f;  // an extreme value in the last (maybe partial) group
        const inferkit::Int4Weights q(w.view(), {gs, sym});
        INFO("group " << gs << (sym ? " sym " : " asym ") << rows << " x " << cols);
        const long groups = (cols + gs - 1) / gs;
        REQUIRE(q.groups_per_row() == groups);
        CHECK(q.padded_cols() == (cols + 63) / 64 * 64);
        CHECK(q.bytes() == static_cast<std::size_t>(rows * q.padded_cols() / 2 + rows * groups * (sym ? 2 : 4)));
        for (long n = 0; n < rows; ++n)
          for (long g = 0; g < groups; ++g) {
            const long k0 = g * gs, len = std::min(cols, k0 + gs) - k0;
            const Group ref = reference_group(w.row(n) + k0, len, sym);
            REQUIRE(q.step(n, g) == ref.step);
            REQUIRE(q.zero(n, g) == ref.zero);
            for (long i = 0; i < len; ++i) {
              REQUIRE(q.code(n, k0 + i) == ref.codes[static_cast<std::size_t>(i)]);
              // within half a stored step (plus the float rounding of code * step + zero)
              const double back = double(q.code(n, k0 + i)) * ref.step + ref.zero;
              CHECK(std::abs(back - w(n, k0 + i)) <= 0.5 * ref.step + 1e-6 * std::abs(ref.zero) + 1e-30);
              CHECK(q.dequantized(n, k0 + i) == static_cast<float>(q.code(n, k0 + i)) * ref.step + ref.zero);
            }
          }
        for (long n = 0; n < rows; ++n)  // padding holds code 0
          for (long k = cols; k < q.padded_cols(); ++k) CHECK(q.code(n, k) == 0);
      }
}

TEST_CASE("int4 weights: nibble layout of a chunk", "[quant][int4]") {
  Mat w(1, 64);
  for (long k = 0; k < 64; ++k) w(0, k) = static_cast<float>(k % 15) - 7.0f;
  const inferkit::Int4Weights q(w.view(), {64, true});
  const std::uint8_t* b = q.row_codes(0);
  for (long j = 0; j < 32; ++j) {
    CHECK((b[j] & 0xF) == q.code(0, j));
    CHECK((b[j] >> 4) == q.code(0, j + 32));
  }
}

TEST_CASE("int4 weights: bad group size, NaN and binary16 overflow are rejected", "[quant][int4][errors]") {
  Mat w(2, 64, 0.5f);
  CHECK_THROWS_WITH(inferkit::Int4Weights(w.view(), {16, true}), Catch::Contains("spec.group_size = 16"));
  w(1, 40) = std::nanf("");
  CHECK_THROWS_WITH(inferkit::Int4Weights(w.view()), Catch::Contains("w(1, 40) = nan"));
  w(1, 40) = 1e6f;
  CHECK_THROWS_WITH(inferkit::Int4Weights(w.view()), Catch::Contains("w row 1 group 1"));
  w(1, 40) = -1e6f;
  CHECK_THROWS_WITH(inferkit::Int4Weights(w.view(), {32, false}), Catch::Contains("too large for a binary16"));
}
