#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "inferkit/core/philox.hpp"

using inferkit::CounterRng;
using inferkit::Philox4x32;

// Known-answer vectors published with Random123 (kat_vectors, "philox4x32 10" rows):
// counter[4], key[2] -> output[4].
TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors", "[core][philox]") {
  CHECK(Philox4x32::generate({0, 0, 0, 0}, {0, 0}) ==
        Philox4x32::Counter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(Philox4x32::generate({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        Philox4x32::Counter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(Philox4x32::generate({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        Philox4x32::Counter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  static_assert(Philox4x32::generate({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u, "usable at compile time");
}

TEST_CASE("CounterRng is a pure function of (seed, stream, index)", "[core][philox]") {
  const CounterRng a(42, 7), b(42, 7), other_stream(42, 8), other_seed(43, 7);
  CHECK(a.block(123) == b.block(123));
  CHECK(a.block(123) != a.block(124));
  CHECK(a.block(123) != other_stream.block(123));
  CHECK(a.block(123) != other_seed.block(123));
  // Order of evaluation does not matter.
  const auto late = a.block(1000000);
  (void)a.block(5);
  CHECK(a.block(1000000) == late);
}

TEST_CASE("uniform helpers cover their intervals", "[core][philox]") {
  CHECK(CounterRng::to_unit_float(0) == 0.0f);
  CHECK(CounterRng::to_unit_float(0xffffffffu) < 1.0f);
  CHECK(CounterRng::to_open_closed_float(0) > 0.0f);
  CHECK(CounterRng::to_open_closed_float(0xffffffffu) == 1.0f);
  CHECK(CounterRng::to_unit_double(0xffffffffu, 0xffffffffu) < 1.0);
  CHECK(CounterRng::to_unit_double(0, 0) == 0.0);
  // Mean and variance of 200k uniforms: 1/2 and 1/12 within 5 standard errors.
  const CounterRng rng(2026);
  const int n = 200000;
  double s = 0, s2 = 0;
  std::vector<int> bins(10, 0);
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform_double(static_cast<std::uint64_t>(i));
    s += u;
    s2 += u * u;
    ++bins[static_cast<int>(u * 10)];
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  CHECK(std::abs(mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::abs(var - 1.0 / 12) < 0.002);
  // Chi-square over 10 bins, 9 degrees of freedom: the 0.999 quantile is 27.88.
  double chi2 = 0;
  for (int c : bins) chi2 += (c - n / 10.0) * (c - n / 10.0) / (n / 10.0);
  CHECK(chi2 < 27.88);
}
