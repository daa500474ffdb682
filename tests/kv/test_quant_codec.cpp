#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "inferkit/kv/quant_codec.hpp"
#include "inferkit/kv/quantized_cache.hpp"

using inferkit::QuantSpec;

namespace {
// Quantizes and dequantizes one group; returns the largest error over half a step (must be <= 1).
double worst_error_in_half_steps(const std::vector<float>& x, const QuantSpec& s) {
  const auto p = inferkit::choose_params(x.data(), static_cast<inferkit::Index>(x.size()), 1, s);
  const double step = inferkit::to_float(p.step);
  std::vector<std::uint8_t> bytes(x.size());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    inferkit::put_code(bytes.data(), static_cast<inferkit::Index>(i), inferkit::encode(x[i], p, s), s.bits);
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float back =
        inferkit::decode(inferkit::get_code(bytes.data(), static_cast<inferkit::Index>(i), s.bits), p, s);
    const double err = std::abs(double(back) - double(x[i]));
    if (step == 0) {
      if (err != 0) return INFINITY;
    } else {
      worst = std::max(worst, err / (0.5 * step * (1 + 1e-5)) - 1e-6 / step);
    }
  }
  return worst;
}
}  // namespace

TEST_CASE("every codec reconstructs within half a step", "[kv][quant]") {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int bits : {8, 4, 2})
    for (bool sym : {true, false}) {
      QuantSpec s{bits, sym, 32};
      INFO("bits " << bits << (sym ? " symmetric" : " asymmetric"));
      for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> x(32);
        for (auto& v : x) v = nd(rng) * (trial % 7 == 0 ? 100.0f : 1.0f) + (trial % 5 == 0 ? 30.0f : 0.0f);
        CHECK(worst_error_in_half_steps(x, s) <= 1.0);
      }
      // Constant, zero and extreme groups.
      CHECK(worst_error_in_half_steps(std::vector<float>(32, 3.25f), s) <= 1.0);
      CHECK(worst_error_in_half_steps(std::vector<float>(32, 0.0f), s) <= 1.0);
      std::vector<float> ext(32, 0.0f);
      ext[3] = 1000.0f;
      ext[9] = -1000.0f;
      CHECK(worst_error_in_half_steps(ext, s) <= 1.0);
    }
}

TEST_CASE("stored metadata never shrinks the step or raises the minimum", "[kv][quant]") {
  for (float x : {1e-5f, 0.1f, 1.0f, 3.14159f, 1000.0f, 65000.0f}) {
    CHECK(inferkit::to_float(inferkit::detail::f16_round_up(x)) >= x);
    CHECK(inferkit::to_float(inferkit::detail::f16_round_down(x)) <= x);
    CHECK(inferkit::to_float(inferkit::detail::f16_round_down(-x)) <= -x);
  }
}

TEST_CASE("packed codes round-trip at every bit width", "[kv][quant]") {
  for (int bits : {8, 4, 2}) {
    std::vector<std::uint8_t> bytes(64, 0xAA);
    for (int i = 0; i < 64 * 8 / bits; ++i) inferkit::put_code(bytes.data(), i, (i * 7 + 3) % (1 << bits), bits);
    for (int i = 0; i < 64 * 8 / bits; ++i)
      CHECK(inferkit::get_code(bytes.data(), i, bits) == (i * 7 + 3) % (1 << bits));
  }
}

TEST_CASE("quantizing NaN or infinity is rejected", "[kv][quant][errors]") {
  QuantSpec s{8, true, 4};
  std::vector<float> x{1.0f, std::nanf(""), 2.0f, 3.0f};
  CHECK_THROWS_WITH(inferkit::choose_params(x.data(), 4, 1, s), Catch::Contains("kv value = nan"));
  x[1] = INFINITY;
  CHECK_THROWS_AS(inferkit::choose_params(x.data(), 4, 1, s), std::invalid_argument);
  CHECK_THROWS_WITH(inferkit::validate_quant_spec(QuantSpec{3, true, 32}, "keys"), Catch::Contains("keys.bits = 3"));
  CHECK_THROWS_WITH(inferkit::validate_quant_spec(QuantSpec{4, true, 3}, "values"),
                    Catch::Contains("values.group_size = 3"));
}

// Regressions from tests/fuzz/fuzz_quant_codec: an append the cache rejects must leave it as it
// was (rows are checked before anything changes), and it must be rejected when it is appended,
// not when its rows later leave the full-precision tail.
TEST_CASE("a rejected append leaves the quantized cache unchanged", "[kv][quant][errors]") {
  using inferkit::QuantAxis;
  const auto row_of = [](const inferkit::QuantizedKvCache& c, inferkit::Index t) {
    std::vector<float> all(static_cast<std::size_t>(c.length(0) * 4));
    c.source(0).block(0, 0).keys.load_f32(0, c.length(0), 4, all.data(), 4, false);
    return std::vector<float>(all.begin() + t * 4, all.begin() + t * 4 + 4);
  };
  SECTION("per-token rows held in the tail") {
    const QuantSpec s{8, true, 4, QuantAxis::kPerToken, 2};
    inferkit::QuantizedKvCache c(1, 1, 4, {s, s});
    std::vector<float> nan_row{1.0f, std::nanf(""), 2.0f, 3.0f}, row{1.0f, 2.0f, 3.0f, 4.0f};
    CHECK_THROWS_WITH(c.append(0, {nan_row.data(), 1, 1, 4}, {row.data(), 1, 1, 4}), Catch::Contains("kv value = nan"));
    CHECK(c.length(0) == 0);
    for (int i = 0; i < 3; ++i) CHECK_NOTHROW(c.append(0, {row.data(), 1, 1, 4}, {row.data(), 1, 1, 4}));
    CHECK(c.length(0) == 3);
    for (int t = 0; t < 3; ++t)
      for (int j = 0; j < 4; ++j)
        CHECK(row_of(c, t)[static_cast<std::size_t>(j)] == Approx(row[static_cast<std::size_t>(j)]).margin(0.02));
  }
  SECTION("a per-channel group whose range overflows binary16 only with the new token") {
    // 2-bit asymmetric groups of 2 tokens: -65000 and 140000 are each fine alone, but together
    // need a step of (140000 + 65024) / 3 > 65504.
    const QuantSpec s{2, false, 2, QuantAxis::kPerChannel, 0};
    inferkit::QuantizedKvCache c(1, 1, 4, {s, s});
    const std::vector<float> a(4, -65000.0f), b(4, 140000.0f), small(4, 1.0f);
    CHECK_NOTHROW(c.append(0, {a.data(), 1, 1, 4}, {small.data(), 1, 1, 4}));
    CHECK_THROWS_WITH(c.append(0, {b.data(), 1, 1, 4}, {small.data(), 1, 1, 4}), Catch::Contains("too large"));
    CHECK(c.length(0) == 1);
    CHECK_NOTHROW(c.append(0, {small.data(), 1, 1, 4}, {small.data(), 1, 1, 4}));
    REQUIRE(c.length(0) == 2);
    const std::vector<float> r0 = row_of(c, 0), r1 = row_of(c, 1);
    const double half_step = (1.0 + 65024.0) / 3 / 2 * 1.01;  // this group's range over its levels, halved
    for (int j = 0; j < 4; ++j) {
      CHECK(std::abs(r0[static_cast<std::size_t>(j)] + 65000.0) <= half_step);
      CHECK(std::abs(r1[static_cast<std::size_t>(j)] - 1.0) <= half_step);
    }
  }
}
