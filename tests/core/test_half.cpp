#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "inferkit/core/half.hpp"

using inferkit::BFloat16;
using inferkit::Float16;

namespace {

// Independent reference: the finite non-negative values of a 16-bit format, decoded from the
// format's definition (sign, exp_bits, man_bits) in double, and nearest-even rounding by search.
struct Format16 {
  int exp_bits, man_bits;
  double decode(std::uint16_t bits) const {
    const int bias = (1 << (exp_bits - 1)) - 1;
    const int e = (bits >> man_bits) & ((1 << exp_bits) - 1);
    const int m = bits & ((1 << man_bits) - 1);
    const double sign = (bits >> 15) ? -1.0 : 1.0;
    if (e == (1 << exp_bits) - 1) return m ? std::nan("") : sign * INFINITY;
    if (e == 0) return sign * std::ldexp(m, 1 - bias - man_bits);
    return sign * std::ldexp((1 << man_bits) + m, e - bias - man_bits);
  }
  std::uint16_t max_finite() const { return static_cast<std::uint16_t>(((((1 << exp_bits) - 1) << man_bits) - 1)); }
  // Nearest even rounding of |x| among finite values; the infinity pattern past max + ulp/2.
  std::uint16_t round(double x) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::abs(x);
    const std::uint16_t top = max_finite();
    const double max = decode(top), ulp = max - decode(top - 1);
    if (a >= max + ulp / 2) return sign | static_cast<std::uint16_t>(top + 1);
    std::uint16_t lo = 0, hi = top;  // largest bits with decode(bits) <= a
    while (lo < hi) {
      const std::uint16_t mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
      if (decode(mid) <= a)
        lo = mid;
      else
        hi = mid - 1;
    }
    if (lo == top) return sign | lo;
    const double d_lo = a - decode(lo), d_hi = decode(lo + 1) - a;
    if (d_lo < d_hi) return sign | lo;
    if (d_hi < d_lo) return sign | static_cast<std::uint16_t>(lo + 1);
    return sign | static_cast<std::uint16_t>((lo & 1) ? lo + 1 : lo);
  }
};
constexpr Format16 kHalf{5, 10};
constexpr Format16 kBf16{8, 7};

}  // namespace

TEST_CASE("every binary16 bit pattern widens exactly and round-trips", "[core][half]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const Float16 h{static_cast<std::uint16_t>(b)};
    const float f = inferkit::to_float(h);
    const double ref = kHalf.decode(h.bits);
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
      const Float16 back = inferkit::to_float16(f);
      REQUIRE((back.bits & 0x7C00) == 0x7C00);
      REQUIRE((back.bits & 0x03FF) != 0);
      REQUIRE((back.bits & 0x8000) == (h.bits & 0x8000));
    } else {
      REQUIRE(double(f) == ref);
      REQUIRE(std::signbit(f) == bool(h.bits & 0x8000));
      REQUIRE(inferkit::to_float16(f).bits == h.bits);
    }
  }
}

TEST_CASE("every bfloat16 bit pattern widens exactly and round-trips", "[core][half]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const BFloat16 h{static_cast<std::uint16_t>(b)};
    const float f = inferkit::to_float(h);
    const double ref = kBf16.decode(h.bits);
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(inferkit::to_float(inferkit::to_bfloat16(f))));
    } else {
      REQUIRE(double(f) == ref);
      REQUIRE(inferkit::to_bfloat16(f).bits == h.bits);
    }
  }
}

TEST_CASE("narrowing rounds to nearest even at every tie", "[core][half]") {
  // The midpoint of two adjacent 16-bit values is exactly representable in binary32.
  for (std::uint32_t b = 0; b < 0x7C00; ++b) {
    const double mid = (kHalf.decode(b) + kHalf.decode(b + 1)) / 2;
    const std::uint16_t expect = (b & 1) ? b + 1 : b;
    REQUIRE(inferkit::to_float16(float(mid)).bits == expect);
    REQUIRE(inferkit::to_float16(float(-mid)).bits == (expect | 0x8000));
  }
  for (std::uint32_t b = 0; b < 0x7F80; ++b) {
    const double mid = (kBf16.decode(b) + kBf16.decode(b + 1)) / 2;
    const std::uint16_t expect = (b & 1) ? b + 1 : b;
    REQUIRE(inferkit::to_bfloat16(float(mid)).bits == expect);
  }
}

TEST_CASE("narrowing matches the reference on random floats of every magnitude", "[core][half]") {
  std::mt19937 rng(12345);
  for (int i = 0; i < 400000; ++i) {
    float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    // Bias half of the draws into binary16's range so normals and subnormals are well covered.
    if (i % 2) {
      int e = 0;
      f = std::ldexp(std::frexp(f, &e), int(rng() % 50) - 32);
    }
    REQUIRE(inferkit::to_float16(f).bits == kHalf.round(f));
    REQUIRE(inferkit::to_bfloat16(f).bits == kBf16.round(f));
  }
}

TEST_CASE("binary16 edge cases: overflow, subnormals, signed zero, NaN", "[core][half]") {
  CHECK(inferkit::to_float16(65504.0f).bits == 0x7BFF);
  CHECK(inferkit::to_float16(65519.99f).bits == 0x7BFF);
  CHECK(inferkit::to_float16(65520.0f).bits == 0x7C00);  // tie rounds to even: infinity
  CHECK(inferkit::to_float16(-1e9f).bits == 0xFC00);
  CHECK(inferkit::to_float16(std::ldexp(1.0f, -24)).bits == 0x0001);  // smallest subnormal
  CHECK(inferkit::to_float16(std::ldexp(1.0f, -25)).bits == 0x0000);  // tie to even: zero
  CHECK(inferkit::to_float16(std::ldexp(1.5f, -25)).bits == 0x0001);
  CHECK(inferkit::to_float16(-0.0f).bits == 0x8000);
  CHECK(inferkit::to_float16(1.0f + std::ldexp(1.0f, -11)).bits == 0x3C00);      // tie: stays 1
  CHECK(inferkit::to_float16(1.0f + 3 * std::ldexp(1.0f, -11)).bits == 0x3C02);  // tie: up to even
  CHECK(std::isnan(inferkit::to_float(inferkit::to_float16(std::nanf("")))));
  CHECK(inferkit::to_bfloat16(std::numeric_limits<float>::max()).bits == 0x7F80);  // rounds to inf
  CHECK(std::isnan(inferkit::to_float(inferkit::to_bfloat16(std::nanf("")))));
  // A NaN whose payload lives only in the low 16 bits must not become infinity.
  CHECK(std::isnan(inferkit::to_float(inferkit::to_bfloat16(std::bit_cast<float>(0x7F800001u)))));
}
