#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "inferkit/core/simd.hpp"

namespace simd = inferkit::simd;

namespace {
std::vector<float> random_floats(std::size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
}  // namespace

TEST_CASE("SIMD reductions match double-precision loops for every tail length", "[core][simd]") {
  INFO("isa = " << simd::isa_name() << ", width = " << simd::kWidth);
  for (std::size_t n = 0; n <= 3 * simd::kWidth + 1; ++n) {
    auto a = random_floats(n, 1 + n, -3.0f, 3.0f);
    auto b = random_floats(n, 100 + n, -3.0f, 3.0f);
    double s = 0, d = 0, m = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
      s += a[i];
      d += double(a[i]) * b[i];
      m = std::max<double>(m, a[i]);
    }
    CHECK(simd::sum_of(a.data(), n) == Approx(s).margin(1e-5));
    CHECK(simd::dot(a.data(), b.data(), n) == Approx(d).margin(1e-5));
    CHECK(double(simd::max_of(a.data(), n)) == m);
  }
}

TEST_CASE("SIMD exp is accurate to a few ulp and maps -inf to 0", "[core][simd]") {
  auto x = random_floats(1000, 7, -87.0f, 80.0f);
  x.push_back(0.0f);
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(-120.0f);  // underflows to 0 or a subnormal
  std::vector<float> out(x.size());
  const float sum = simd::exp_shifted(x.data(), out.data(), x.size(), 0.0f);
  double ref_sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(double(x[i]));
    ref_sum += ref;
    CHECK(std::abs(out[i] - ref) <= 4 * std::numeric_limits<float>::epsilon() * ref + 1e-37);
  }
  CHECK(out[x.size() - 2] == 0.0f);
  CHECK(double(sum) == Approx(ref_sum).epsilon(1e-5));
}

TEST_CASE("SIMD exp is within 2 ulp over its whole range, and exp_nonpositive has its bits", "[core][simd]") {
  INFO("isa = " << simd::isa_name());
  // Every 211th float from kExpLo to kExpHi (about 10.6 million), against the fp64 exp; the ulp is
  // that of the float binade of the exact result. Then the edges: the float below kExpLo gives
  // 0, kExpLo a normal float, and exp_nonpositive the same bits as exp wherever x <= 0.
  const auto ulp_error = [](float x, float got) {
    const double ref = std::exp(double(x));
    const double flt_max = std::numeric_limits<float>::max();
    if (ref >= flt_max * (1.0 + std::ldexp(1.0, -25))) return std::isinf(got) ? 0.0 : 1e9;  // rounds to +inf
    return std::abs(double(got) - ref) / std::ldexp(1.0, std::ilogb(ref) - 23);
  };
  double worst = 0.0, worst_x = 0.0;
  std::size_t differ = 0;
  std::vector<float> in(simd::kWidth), a(simd::kWidth), b(simd::kWidth);
  const auto lo = std::bit_cast<std::uint32_t>(simd::kExpLo);  // negative floats: larger bits, lower values
  const auto zero = std::bit_cast<std::uint32_t>(-0.0f);
  const auto hi = std::bit_cast<std::uint32_t>(simd::kExpHi);
  std::uint64_t step = 0;
  const auto next_input = [&]() -> float {  // walks [kExpLo, -0] then [+0, kExpHi]
    const std::uint64_t negatives = lo - zero + 1;
    const std::uint64_t i = step;
    step += 211;
    if (i < negatives) return std::bit_cast<float>(static_cast<std::uint32_t>(lo - i));
    if (i - negatives <= hi) return std::bit_cast<float>(static_cast<std::uint32_t>(i - negatives));
    return std::numeric_limits<float>::quiet_NaN();
  };
  bool more = true;
  while (more) {
    for (auto& v : in) {
      v = next_input();
      if (std::isnan(v)) {
        more = false;
        v = simd::kExpHi;
      }
    }
    simd::store(a.data(), simd::exp(simd::load(in.data())));
    simd::store(b.data(), simd::exp_nonpositive(simd::load(in.data())));
    for (std::size_t l = 0; l < simd::kWidth; ++l) {
      const double e = ulp_error(in[l], a[l]);
      if (e > worst) worst = e, worst_x = in[l];
      if (in[l] <= 0.0f && std::bit_cast<std::uint32_t>(a[l]) != std::bit_cast<std::uint32_t>(b[l])) ++differ;
    }
  }
  INFO("worst " << worst << " ulp at x = " << worst_x << " over " << step / 211 << " inputs");
  CHECK(worst <= 2.0);
  CHECK(differ == 0);
  CHECK(step / 211 > 10'000'000);
  const float below = std::nextafter(simd::kExpLo, -std::numeric_limits<float>::infinity());
  for (float x : {simd::kExpLo, below}) {
    std::fill(in.begin(), in.end(), x);
    simd::store(a.data(), simd::exp(simd::load(in.data())));
    simd::store(b.data(), simd::exp_nonpositive(simd::load(in.data())));
    if (x == below) {
      CHECK(a[0] == 0.0f);
      CHECK(b[0] == 0.0f);
    } else {
      CHECK(std::fpclassify(a[0]) == FP_NORMAL);
      CHECK(b[0] == a[0]);
      CHECK(ulp_error(x, a[0]) <= 2.0);
    }
  }
}

TEST_CASE("exp_shifted never reads or writes past n", "[core][simd]") {
  for (std::size_t n = 0; n < 2 * simd::kWidth + 2; ++n) {
    std::vector<float> buf(n + 4, 1.0f);
    buf[n] = buf[n + 1] = 42.0f;  // sentinels just past the range
    simd::exp_shifted(buf.data(), buf.data(), n, 1.0f);
    CHECK(buf[n] == 42.0f);
    CHECK(buf[n + 1] == 42.0f);
    for (std::size_t i = 0; i < n; ++i) CHECK(buf[i] == Approx(1.0f).epsilon(1e-6));
  }
}

TEST_CASE("axpy and scale handle tails", "[core][simd]") {
  for (std::size_t n = 0; n < 2 * simd::kWidth + 3; ++n) {
    auto x = random_floats(n, 3 + n, -1.0f, 1.0f);
    auto y = random_floats(n + 1, 5 + n, -1.0f, 1.0f);
    const float sentinel = y[n];
    auto expect = y;
    for (std::size_t i = 0; i < n; ++i) expect[i] = (expect[i] + 0.5f * x[i]) * 2.0f;
    simd::axpy(y.data(), 0.5f, x.data(), n);
    simd::scale(y.data(), n, 2.0f);
    for (std::size_t i = 0; i < n; ++i) CHECK(y[i] == Approx(expect[i]).margin(1e-6));
    CHECK(y[n] == sentinel);
  }
}

TEST_CASE("hmax and hsum cover every lane", "[core][simd]") {
  std::vector<float> lanes(simd::kWidth);
  for (std::size_t hot = 0; hot < simd::kWidth; ++hot) {
    for (std::size_t i = 0; i < simd::kWidth; ++i) lanes[i] = i == hot ? 5.0f : -1.0f;
    const auto v = simd::load(lanes.data());
    CHECK(simd::hmax(v) == 5.0f);
    CHECK(simd::hsum(v) == Approx(5.0f - float(simd::kWidth - 1)));
  }
}

TEST_CASE("haddp puts the sum of row i in lane i", "[core][simd]") {
  std::vector<simd::VecF> rows(simd::kWidth);
  std::vector<double> expect(simd::kWidth);
  for (std::size_t i = 0; i < simd::kWidth; ++i) {
    auto v = random_floats(simd::kWidth, 40 + i, -2.0f, 2.0f);
    for (float x : v) expect[i] += x;
    rows[i] = simd::load(v.data());
  }
  std::vector<float> out(simd::kWidth);
  simd::store(out.data(), simd::haddp(rows.data()));
  for (std::size_t i = 0; i < simd::kWidth; ++i) CHECK(out[i] == Approx(expect[i]).margin(1e-5));
}

TEST_CASE("exp_nonpositive gives exp's bits on every non-positive input", "[core][simd]") {
  std::vector<float> x = random_floats(4096, 11, -120.0f, 0.0f);
  const float edges[] = {0.0f,
                         -0.0f,
                         -87.3365447f,
                         std::nextafter(-87.3365447f, 0.0f),
                         std::nextafter(-87.3365447f, -1.0f),
                         -1e-30f,
                         -std::numeric_limits<float>::infinity()};
  x.insert(x.end(), std::begin(edges), std::end(edges));
  while (x.size() % simd::kWidth) x.push_back(-1.0f);
  for (std::size_t i = 0; i < x.size(); i += simd::kWidth) {
    alignas(64) float a[simd::kWidth], b[simd::kWidth];
    simd::store(a, simd::exp(simd::load(x.data() + i)));
    simd::store(b, simd::exp_nonpositive(simd::load(x.data() + i)));
    for (std::size_t j = 0; j < simd::kWidth; ++j) {
      INFO("x = " << x[i + j]);
      CHECK(std::bit_cast<std::uint32_t>(a[j]) == std::bit_cast<std::uint32_t>(b[j]));
    }
  }
}
