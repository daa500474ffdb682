// Residual edits (steering/residual_ops.hpp) against closed forms and fp64 references, on
// lengths that exercise every SIMD tail.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "inferkit/core/simd.hpp"
#include "inferkit/steering/residual_ops.hpp"
#include "steering_test_util.hpp"

using namespace steering_test;
using inferkit::EditOptions;

TEST_CASE("f64 dot products follow the documented lane order and are exact to double rounding", "[steering][ops]") {
  INFO("isa = " << inferkit::simd::isa_name());
  const std::size_t lanes = 2 * inferkit::simd::kWidth;
  for (std::size_t n : kDims) {
    const auto a = normal(n, 11 + static_cast<unsigned>(n), 3.0f), b = normal(n, 12 + static_cast<unsigned>(n));
    // The order stated in f64_accumulate.hpp: element i into lane i mod 2W, lanes halved pairwise.
    std::vector<double> l(lanes, 0.0);
    for (std::size_t i = 0; i < n; ++i) l[i % lanes] += double(a[i]) * double(b[i]);
    for (std::size_t m = lanes; m > 1; m /= 2)
      for (std::size_t j = 0; j < m / 2; ++j) l[j] += l[j + m / 2];
    CHECK(inferkit::detail::dot_f64(a.data(), b.data(), n) == l[0]);
    // And against a long-double sum: within n double roundings of sum |a_i b_i|.
    CHECK(std::abs(inferkit::detail::dot_f64(a.data(), b.data(), n) - dot(a, b)) <=
          double(n) * 0x1p-53 * abs_dot(a, b));
    CHECK(std::abs(inferkit::detail::squared_norm_f64(a.data(), n) - dot(a, a)) <= double(n) * 0x1p-53 * dot(a, a));
  }
}

TEST_CASE("addition: h + scale * v to float rounding, never past the end", "[steering][ops]") {
  for (std::size_t n : kDims) {
    for (float scale : {1.0f, -3.5f, 0.125f}) {
      const auto h0 = normal(n, 1 + static_cast<unsigned>(n)), v = normal(n, 2 + static_cast<unsigned>(n));
      std::vector<float> buf(h0);
      buf.push_back(123.0f);  // guard element after the row
      inferkit::add_direction(std::span<float>(buf.data(), n), v, {.scale = scale});
      CHECK(buf[n] == 123.0f);
      for (std::size_t i = 0; i < n; ++i) {
        const double ref = double(h0[i]) + double(scale) * double(v[i]);
        // One rounding with FMA, two without: within 2 eps of the terms' magnitudes.
        CHECK(std::abs(buf[i] - ref) <= 2 * kEps * (std::abs(double(h0[i])) + std::abs(double(scale) * v[i])));
      }
    }
  }
}

TEST_CASE("scale 0 is the identity bitwise, also for -0, NaN and with norm preservation", "[steering][ops]") {
  for (std::size_t n : kDims) {
    auto h = normal(n, 3 + static_cast<unsigned>(n));
    h[0] = -0.0f;
    if (n > 2) h[2] = std::numeric_limits<float>::quiet_NaN();
    const auto v = normal(n, 4 + static_cast<unsigned>(n)), before = h;
    for (bool preserve : {false, true}) {
      inferkit::add_direction(h, v, {.scale = 0.0f, .preserve_norm = preserve});
      CHECK(same_bits(h, before));
      inferkit::ablate_direction(h, v, {.scale = 0.0f, .preserve_norm = preserve});
      CHECK(same_bits(h, before));
    }
  }
}

TEST_CASE("a zero v added to h changes nothing; ablation of an orthogonal h changes nothing", "[steering][ops]") {
  for (std::size_t n : kDims) {
    auto h = normal(n, 5 + static_cast<unsigned>(n));
    const auto before = h;
    inferkit::add_direction(h, std::vector<float>(n, 0.0f), {.scale = 2.0f, .preserve_norm = true});
    CHECK(same_bits(h, before));
    if (n < 2) continue;
    std::vector<float> e0(n, 0.0f);  // h with h[0] = 0 is orthogonal to e0 exactly
    e0[0] = 1.0f;
    h[0] = 0.0f;
    const auto before2 = h;
    inferkit::ablate_direction(h, e0);
    CHECK(same_bits(h, before2));
  }
}

TEST_CASE("norm-preserving addition keeps ||h|| within 2 eps and points along h + scale * v", "[steering][ops]") {
  for (std::size_t n : kDims) {
    for (float scale : {0.5f, 4.0f, -20.0f}) {
      const auto h0 = normal(n, 6 + static_cast<unsigned>(n), 2.0f), v = normal(n, 7 + static_cast<unsigned>(n));
      auto h = h0;
      inferkit::add_direction(h, v, {.scale = scale, .preserve_norm = true});
      const double n0 = norm(h0);
      CHECK(std::abs(norm(h) - n0) <= 2.000001 * kEps * n0);
      // Direction: fp64 (h + s v) / ||h + s v|| * ||h||.
      std::vector<double> ref(n);
      double rn = 0;
      for (std::size_t i = 0; i < n; ++i) rn += (ref[i] = double(h0[i]) + double(scale) * v[i]) * ref[i];
      rn = std::sqrt(rn);
      for (std::size_t i = 0; i < n; ++i) {
        const double mag = (std::abs(double(h0[i])) + std::abs(double(scale) * v[i])) * n0 / rn;
        CHECK(std::abs(h[i] - ref[i] * n0 / rn) <= 4 * kEps * (mag + std::abs(ref[i]) * n0 / rn) + 1e-30);
      }
    }
  }
}

TEST_CASE("ablation leaves h . u = 0 within the stated bound and matches the fp64 projection", "[steering][ops]") {
  for (std::size_t n : kDims) {
    const auto u = normal(n, 8 + static_cast<unsigned>(n), 0.3f);  // not unit length on purpose
    for (int shape = 0; shape < 3; ++shape) {
      auto h0 = normal(n, 9 + static_cast<unsigned>(n), 5.0f);
      if (shape == 1)  // nearly parallel to u: h . u dominates, cancellation in h - c u
        for (std::size_t i = 0; i < n; ++i) h0[i] = 7.0f * u[i] + 1e-4f * h0[i];
      if (shape == 2)  // large offset along u
        for (std::size_t i = 0; i < n; ++i) h0[i] += 1000.0f * u[i];
      auto h = h0;
      inferkit::ablate_direction(h, u);
      const double hu = dot(h0, u), uu = dot(u, u);
      // The bound of residual_ops.hpp.
      const double bound =
          2 * kEps * (std::abs(hu) + norm(h) * std::sqrt(uu)) + double(n + 1) * 0x1p-52 * norm(h0) * std::sqrt(uu);
      INFO("n = " << n << ", shape = " << shape << ", h.u before = " << hu << ", after = " << dot(h, u)
                  << ", bound = " << bound);
      CHECK(std::abs(dot(h, u)) <= bound);
      for (std::size_t i = 0; i < n; ++i) {
        const double ref = double(h0[i]) - hu / uu * double(u[i]);
        CHECK(std::abs(h[i] - ref) <= 4 * kEps * (std::abs(double(h0[i])) + std::abs(hu / uu * u[i])));
      }
    }
  }
}

TEST_CASE("ablation scale: 2 reflects the component, 0.5 halves it; norm preservation", "[steering][ops]") {
  for (std::size_t n : kDims) {
    const auto u = normal(n, 20 + static_cast<unsigned>(n));
    const auto h0 = normal(n, 21 + static_cast<unsigned>(n), 3.0f);
    const double hu = dot(h0, u), scale_ref = norm(h0) * norm(u);
    auto h = h0;
    inferkit::ablate_direction(h, u, {.scale = 2.0f});
    CHECK(std::abs(dot(h, u) + hu) <= 8 * kEps * scale_ref);
    CHECK(std::abs(norm(h) - norm(h0)) <= 8 * kEps * norm(h0));  // a reflection keeps the norm
    h = h0;
    inferkit::ablate_direction(h, u, {.scale = 0.5f});
    CHECK(std::abs(dot(h, u) - 0.5 * hu) <= 8 * kEps * scale_ref);
    // Norm-preserving ablation: the plain result rescaled by f = ||h|| / ||h'||, so its residual
    // along u is f times the plain bound (large only when h was nearly parallel to u).
    auto plain = h0;
    inferkit::ablate_direction(plain, u);
    h = h0;
    inferkit::ablate_direction(h, u, {.scale = 1.0f, .preserve_norm = true});
    INFO("n = " << n << ", ||plain|| = " << norm(plain));
    if (norm(plain) == 0.0) {  // (n = 1 without FMA) the edit landed on zero, which stays zero
      CHECK(norm(h) == 0.0);
      continue;
    }
    const double f = norm(h0) / norm(plain);
    CHECK(std::abs(norm(h) - norm(h0)) <= 2.000001 * kEps * norm(h0));
    CHECK(std::abs(dot(h, u)) <=
          f * (2 * kEps * (std::abs(hu) + norm(plain) * norm(u)) + double(n + 1) * 0x1p-52 * scale_ref));
  }
}

TEST_CASE("norm preservation of an edit that lands on zero leaves zero", "[steering][ops]") {
  std::vector<float> h{1.0f, -2.0f, 0.5f}, v{1.0f, -2.0f, 0.5f};
  inferkit::add_direction(h, v, {.scale = -1.0f, .preserve_norm = true});
  for (float x : h) CHECK(x == 0.0f);
  std::vector<float> z{0.0f, 0.0f, 0.0f};  // a zero h keeps norm 0 whatever is added
  inferkit::add_direction(z, v, {.scale = 3.0f, .preserve_norm = true});
  for (float x : z) CHECK(x == 0.0f);
}

TEST_CASE("residual edits reject mismatched sizes, zero directions and non-finite input", "[steering][ops][errors]") {
  std::vector<float> h(8, 1.0f), v(7, 1.0f), z(8, 0.0f), bad(8, 1.0f);
  bad[5] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(inferkit::add_direction(h, v), "inferkit: v.size() = 7 is invalid: must equal h.size() (8)");
  CHECK_THROWS_WITH(inferkit::ablate_direction(h, v), "inferkit: u.size() = 7 is invalid: must equal h.size() (8)");
  CHECK_THROWS_WITH(inferkit::ablate_direction(h, z),
                    Catch::Contains("u . u = 0 is invalid") && Catch::Contains("needs a direction"));
  CHECK_THROWS_WITH(inferkit::add_direction(h, bad), "inferkit: v[5] = inf is invalid: must be finite");
  CHECK_THROWS_AS(inferkit::ablate_direction(h, bad), std::invalid_argument);
  CHECK_THROWS_WITH(inferkit::add_direction(h, z, {.scale = std::numeric_limits<float>::quiet_NaN()}),
                    Catch::Contains("scale = nan is invalid: must be finite"));
  CHECK(h == std::vector<float>(8, 1.0f));  // nothing was written
}
