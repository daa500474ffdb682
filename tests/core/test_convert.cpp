#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "inferkit/core/convert.hpp"

using inferkit::BFloat16;
using inferkit::Float16;

namespace {
std::vector<float> interesting_floats(std::size_t n) {
  std::mt19937 rng(99);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (i % 4) {
      case 0:
        v[i] = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
        break;  // incl. NaN/Inf
      case 1:
        v[i] = std::ldexp(float(rng() % 4096) / 4096.0f, int(rng() % 40) - 30);
        break;
      case 2:
        v[i] = std::normal_distribution<float>(0, 3)(rng);
        break;
      default:
        v[i] = float(int(rng() % 200001) - 100000);
        break;
    }
  }
  return v;
}
bool same_bits_or_both_nan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}
}  // namespace

TEST_CASE("bulk widening equals the scalar conversion for every 16-bit pattern", "[core][convert]") {
  std::vector<Float16> h(65536 + 5);
  std::vector<BFloat16> b(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    h[i].bits = static_cast<std::uint16_t>(i);
    b[i].bits = static_cast<std::uint16_t>(i);
  }
  std::vector<float> out(h.size());
  inferkit::convert(h.data(), out.data(), h.size());
  for (std::size_t i = 0; i < h.size(); ++i) REQUIRE(same_bits_or_both_nan(out[i], inferkit::to_float(h[i])));
  inferkit::convert(b.data(), out.data(), b.size());
  for (std::size_t i = 0; i < b.size(); ++i) REQUIRE(same_bits_or_both_nan(out[i], inferkit::to_float(b[i])));
}

TEST_CASE("bulk narrowing equals the scalar conversion, tails included", "[core][convert]") {
  for (std::size_t n : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 33u, 100003u}) {
    const auto f = interesting_floats(n);
    std::vector<Float16> h(n + 1, Float16{0xABCD});
    std::vector<BFloat16> b(n + 1, BFloat16{0xABCD});
    inferkit::convert(f.data(), h.data(), n);
    inferkit::convert(f.data(), b.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const Float16 eh = inferkit::to_float16(f[i]);
      const BFloat16 eb = inferkit::to_bfloat16(f[i]);
      if (std::isnan(f[i])) {
        REQUIRE(std::isnan(inferkit::to_float(h[i])));
        REQUIRE(std::isnan(inferkit::to_float(b[i])));
      } else {
        REQUIRE(h[i].bits == eh.bits);
        REQUIRE(b[i].bits == eb.bits);
      }
    }
    CHECK(h[n].bits == 0xABCD);  // nothing written past the end
    CHECK(b[n].bits == 0xABCD);
  }
}
