#include <catch2/catch.hpp>

#include <cmath>

#include "inferkit/quant/matvec.hpp"
#include "quant_test_util.hpp"

using quant_test::kEps;
using quant_test::Mat;

namespace {

const std::vector<std::pair<long, long>> kShapes = {{1, 1},   {3, 5},    {17, 33},  {40, 130},
                                                    {16, 64}, {33, 257}, {70, 1000}};

// Activations with a wide dynamic range and exact zeros.
std::vector<float> activations(long n, unsigned seed) {
  Mat x = quant_test::normal(1, n, seed, 1.0f);
  for (long i = 0; i < n; i += 7) x.v[static_cast<std::size_t>(i)] *= 20.0f;
  for (long i = 3; i < n; i += 11) x.v[static_cast<std::size_t>(i)] = 0.0f;
  return x.v;
}

}  // namespace

TEST_CASE("int8 matvec, float activations: fp64 reference on every path", "[quant][matvec]") {
  for (auto [rows, cols] : kShapes) {
    const Mat w = quant_test::normal(rows, cols, 3, 0.2f);
    const inferkit::Int8Weights q(w.view());
    const auto x = activations(cols, 4);
    for (auto k : quant_test::kernels_and_auto()) {
      INFO(rows << " x " << cols << " on " << inferkit::quant_kernel_name(k));
      std::vector<float> y(static_cast<std::size_t>(rows), -1.0f);
      inferkit::matvec(q, x, y, {.kernel = k});
      for (long n = 0; n < rows; ++n) {
        double ref = 0, mag = 0, xabs = 0;
        for (long k2 = 0; k2 < cols; ++k2) {
          ref += double(q.code(n, k2)) * x[static_cast<std::size_t>(k2)];
          mag += std::abs(double(q.code(n, k2)) * x[static_cast<std::size_t>(k2)]);
          xabs += std::abs(x[static_cast<std::size_t>(k2)]);
        }
        ref *= q.scale(n);
        mag *= q.scale(n);
        REQUIRE(std::abs(y[static_cast<std::size_t>(n)] - ref) <= (cols + 4) * kEps * mag + 1e-30);
        // Semantics: within half a weight step per feature of the float product.
        double exact = 0;
        for (long k2 = 0; k2 < cols; ++k2) exact += double(w(n, k2)) * x[static_cast<std::size_t>(k2)];
        CHECK(std::abs(y[static_cast<std::size_t>(n)] - exact) <=
              0.5 * q.scale(n) * xabs * (1 + 1e-5) + (cols + 4) * kEps * mag);
      }
    }
  }
}

TEST_CASE("int4 matvec, float activations: fp64 reference on every path", "[quant][matvec]") {
  for (long gs : {32L, 64L})
    for (bool sym : {true, false})
      for (auto [rows, cols] : kShapes) {
        const Mat w = quant_test::normal(rows, cols, 5, 0.2f);
        const inferkit::Int4Weights q(w.view(), {gs, sym});
        const auto x = activations(cols, 6);
        for (auto k : quant_test::kernels_and_auto()) {
          INFO(rows << " x " << cols << " group " << gs << (sym ? " sym" : " asym") << " on "
                    << inferkit::quant_kernel_name(k));
          std::vector<float> y(static_cast<std::size_t>(rows), -1.0f);
          inferkit::matvec(q, x, y, {.kernel = k});
          for (long n = 0; n < rows; ++n) {
            double ref = 0, mag = 0;
            for (long k2 = 0; k2 < cols; ++k2) {
              const long g = k2 / gs;
              const double xv = x[static_cast<std::size_t>(k2)];
              ref += (double(q.code(n, k2)) * q.step(n, g) + q.zero(n, g)) * xv;
              mag += (double(q.code(n, k2)) * q.step(n, g) + std::abs(q.zero(n, g))) * std::abs(xv);
            }
            REQUIRE(std::abs(y[static_cast<std::size_t>(n)] - ref) <= 2 * (cols + 8) * kEps * mag + 1e-30);
          }
        }
      }
}

TEST_CASE("int4 matvec, int8 activations per 32-block: reference of the block formula", "[quant][matvec]") {
  for (long gs : {32L, 64L})
    for (bool sym : {true, false})
      for (auto [rows, cols] : kShapes) {
        const Mat w = quant_test::normal(rows, cols, 8, 0.2f);
        const inferkit::Int4Weights q(w.view(), {gs, sym});
        const auto x = activations(cols, 9);
        // Independent block quantization of x.
        const long blocks = (cols + 31) / 32;
        std::vector<float> d(static_cast<std::size_t>(blocks));
        std::vector<int> qx(static_cast<std::size_t>(cols));
        for (long b = 0; b < blocks; ++b) {
          const long k0 = b * 32, len = std::min(cols, k0 + 32) - k0;
          d[static_cast<std::size_t>(b)] = quant_test::amax(x.data() + k0, len) / 127.0f;
          for (long i = 0; i < len; ++i)
            qx[static_cast<std::size_t>(k0 + i)] =
                quant_test::sym_code(x[static_cast<std::size_t>(k0 + i)], d[static_cast<std::size_t>(b)], 127);
        }
        for (auto k : quant_test::kernels_and_auto()) {
          INFO(rows << " x " << cols << " group " << gs << (sym ? " sym" : " asym") << " on "
                    << inferkit::quant_kernel_name(k));
          std::vector<float> y(static_cast<std::size_t>(rows), -1.0f);
          inferkit::matvec(q, x, y, {.activations = inferkit::ActivationFormat::kInt8, .kernel = k});
          for (long n = 0; n < rows; ++n) {
            double ref = 0, mag = 0, wdx = 0;
            for (long b = 0; b < blocks; ++b) {
              const long k0 = b * 32, len = std::min(cols, k0 + 32) - k0, g = k0 / gs;
              long P = 0, Q = 0;
              for (long i = 0; i < len; ++i) {
                P += long(q.code(n, k0 + i)) * qx[static_cast<std::size_t>(k0 + i)];
                Q += qx[static_cast<std::size_t>(k0 + i)];
                wdx += std::abs(double(q.dequantized(n, k0 + i))) * d[static_cast<std::size_t>(b)];
              }
              const double db = d[static_cast<std::size_t>(b)];
              ref += double(q.step(n, g)) * db * double(P) + double(q.zero(n, g)) * db * double(Q);
              mag += std::abs(double(q.step(n, g)) * db * double(P)) + std::abs(double(q.zero(n, g)) * db * double(Q));
            }
            REQUIRE(std::abs(y[static_cast<std::size_t>(n)] - ref) <= 4 * (blocks + 8) * kEps * mag + 1e-30);
            // Semantics: within half an activation step per feature of the dequantized-weight product.
            double deq = 0;
            for (long k2 = 0; k2 < cols; ++k2) deq += double(q.dequantized(n, k2)) * x[static_cast<std::size_t>(k2)];
            CHECK(std::abs(y[static_cast<std::size_t>(n)] - deq) <=
                  0.5 * wdx * (1 + 1e-5) + 4 * (blocks + 8) * kEps * mag + 1e-6 * std::abs(deq));
          }
        }
      }
}

TEST_CASE("int8 matvec with int8 activations equals the one-row W8A8 product", "[quant][matvec]") {
  const Mat w = quant_test::normal(37, 150, 12, 0.2f);
  const inferkit::Int8Weights q(w.view());
  const auto x = activations(150, 13);
  const float sx = quant_test::amax(x.data(), 150) / 127.0f;
  const auto qx = quant_test::quantize_row(x.data(), 150, sx);
  for (auto k : quant_test::kernels_and_auto()) {
    std::vector<float> y(37);
    inferkit::matvec(q, x, y, {.activations = inferkit::ActivationFormat::kInt8, .kernel = k});
    for (long n = 0; n < 37; ++n) {
      long acc = 0;
      for (long k2 = 0; k2 < 150; ++k2) acc += long(q.code(n, k2)) * qx.codes[static_cast<std::size_t>(k2)];
      CHECK(y[static_cast<std::size_t>(n)] == static_cast<float>(acc) * (sx * q.scale(n)));
    }
  }
}

TEST_CASE("matvec results do not depend on the thread count", "[quant][matvec][threads]") {
  // Large enough (over 2^20 weights) to run threaded; tails in both dimensions.
  const Mat w = quant_test::normal(1100, 1000, 14, 0.2f);
  const inferkit::Int8Weights q8(w.view());
  const inferkit::Int4Weights q4(w.view());
  const auto x = activations(1000, 15);
  for (auto act : {inferkit::ActivationFormat::kFloat, inferkit::ActivationFormat::kInt8}) {
    std::vector<float> a(1100), b(1100), c(1100), d(1100);
    inferkit::matvec(q8, x, a, {.activations = act, .num_threads = 1});
    inferkit::matvec(q8, x, b, {.activations = act, .num_threads = 2});
    inferkit::matvec(q4, x, c, {.activations = act, .num_threads = 1});
    inferkit::matvec(q4, x, d, {.activations = act, .num_threads = 2});
    CHECK(a == b);
    CHECK(c == d);
  }
}

TEST_CASE("matvec rejects bad shapes, non-finite activations and missing paths", "[quant][matvec][errors]") {
  const Mat w = quant_test::normal(4, 6, 16);
  const inferkit::Int8Weights q8(w.view());
  const inferkit::Int4Weights q4(w.view());
  std::vector<float> x(6, 1.0f), y(4), xs(5), ys(3);
  CHECK_THROWS_WITH(inferkit::matvec(q8, xs, y), Catch::Contains("x.size() = 5"));
  CHECK_THROWS_WITH(inferkit::matvec(q4, x, ys), Catch::Contains("y.size() = 3"));
  x[3] = std::nanf("");
  CHECK_THROWS_WITH(inferkit::matvec(q8, x, y), Catch::Contains("x[3] = nan"));
  CHECK_THROWS_WITH(inferkit::matvec(q4, x, y, {.activations = inferkit::ActivationFormat::kInt8}),
                    Catch::Contains("x[3] = nan"));
  x[3] = INFINITY;
  CHECK_THROWS_WITH(inferkit::matvec(q8, x, y, {.activations = inferkit::ActivationFormat::kInt8}),
                    Catch::Contains("x(0, 3) = inf"));
  CHECK_THROWS_WITH(inferkit::resolve_quant_kernel(inferkit::QuantKernel(99)), Catch::Contains("kernel"));
}
