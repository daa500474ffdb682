// GgmlWeights (quant/ggml_weights.hpp) and the plain-type products of quant/ggml_matvec.hpp:
// validation errors name the tensor; F16 / BF16 rows decode as the formats' definitions say
// (decoded here from the bit fields, not by the library's converters); products against fp64.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "inferkit/quant/ggml_matvec.hpp"
#include "inferkit/quant/ggml_weights.hpp"
#include "quant_test_util.hpp"

using inferkit::GgmlType;
using inferkit::GgmlWeights;
using inferkit::Index;

namespace {

// binary16 from its fields: (-1)^s 2^(e-15) (1 + m / 1024), subnormal 2^-14 m / 1024.
double decode_f16(std::uint16_t b) {
  const int s = b >> 15, e = (b >> 10) & 31, m = b & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}
// bfloat16: the upper 16 bits of a binary32 (sign, 8-bit exponent, 7-bit mantissa).
double decode_bf16(std::uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
  const double v = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  return s ? -v : v;
}

// Random finite 16-bit patterns (every exponent but the Inf/NaN one), for F16 (exp 5 bits) or BF16.
std::vector<std::uint16_t> random_halves(std::size_t n, bool bf16, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint16_t> v(n);
  for (auto& b : v) {
    do {
      b = static_cast<std::uint16_t>(rng());
    } while (bf16 ? ((b >> 7) & 255) == 255 : ((b >> 10) & 31) == 31);
  }
  return v;
}

std::vector<std::byte> as_bytes(const void* p, std::size_t n) {
  std::vector<std::byte> b(n);
  std::memcpy(b.data(), p, n);
  return b;
}

// Plain-type weights of a float matrix: F32 as is, F16 / BF16 rounded; `exact` gets the values stored.
std::vector<std::byte> plain_bytes(GgmlType t, const quant_test::Mat& m, std::vector<float>& exact) {
  exact = m.v;
  if (t == GgmlType::kF32) return as_bytes(m.v.data(), m.v.size() * 4);
  std::vector<std::uint16_t> h(m.v.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    h[i] = t == GgmlType::kF16 ? inferkit::to_float16(m.v[i]).bits : inferkit::to_bfloat16(m.v[i]).bits;
    exact[i] = static_cast<float>(t == GgmlType::kF16 ? decode_f16(h[i]) : decode_bf16(h[i]));
  }
  return as_bytes(h.data(), h.size() * 2);
}

}  // namespace

TEST_CASE("GgmlWeights: view is zero-copy, owning owns, errors name the tensor", "[quant][ggml]") {
  std::vector<float> v(6, 1.0f);
  const auto bytes = as_bytes(v.data(), 24);
  const auto w = GgmlWeights::view(GgmlType::kF32, 2, 3, bytes, "blk.0.attn_q.weight");
  CHECK(w.rows() == 2);
  CHECK(w.cols() == 3);
  CHECK(w.row_bytes() == 12);
  CHECK(w.row(1) == bytes.data() + 12);
  CHECK_FALSE(w.owns_data());
  const auto o = GgmlWeights::owning(GgmlType::kF32, 3, 2, bytes, "t");
  CHECK(o.owns_data());
  const GgmlWeights copy = o;  // an owning copy owns its own bytes
  CHECK(copy.bytes().data() != o.bytes().data());
  CHECK(std::memcmp(copy.bytes().data(), o.bytes().data(), 24) == 0);

  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(GgmlWeights::view(GgmlType::kF32, 2, 4, bytes, "blk.3.ffn_up.weight"),
                    Contains("tensor 'blk.3.ffn_up.weight' bytes = 24") && Contains("2 * 16 = 32"));
  CHECK_THROWS_WITH(GgmlWeights::view(GgmlType::kF32, 0, 6, bytes, "x"), Contains("tensor 'x' rows = 0"));
  CHECK_THROWS_WITH(GgmlWeights::view(GgmlType::kIQ2_XS, 1, 256, bytes, "tok_embd"),
                    Contains("tensor 'tok_embd' type = IQ2_XS"));
  CHECK_THROWS_WITH(GgmlWeights::view(static_cast<GgmlType>(77), 1, 6, bytes, "q"),
                    Contains("tensor 'q' type = unknown(77)"));
  CHECK_THROWS_WITH(GgmlWeights::view(GgmlType::kF32, 1ll << 62, 1ll << 40, bytes, "huge"),
                    Contains("tensor 'huge' bytes") && Contains("overflows"));

  v[4] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(GgmlWeights::view(GgmlType::kF32, 2, 3, as_bytes(v.data(), 24), "blk.1.attn_k.weight"),
                    Contains("tensor 'blk.1.attn_k.weight' element (1, 1) = nan"));
  std::vector<std::uint16_t> h(4, 0x3C00);
  h[2] = 0x7C00;  // +inf
  CHECK_THROWS_WITH(GgmlWeights::view(GgmlType::kF16, 1, 4, as_bytes(h.data(), 8), "h"),
                    Contains("tensor 'h' element (0, 2) = inf"));
  h[2] = 0x7F80;  // BF16 +inf
  CHECK_THROWS_WITH(GgmlWeights::view(GgmlType::kBF16, 2, 2, as_bytes(h.data(), 8), "b"),
                    Contains("tensor 'b' element (1, 0) = inf"));
}

TEST_CASE("ggml_dequantize_row: F16 and BF16 decode every finite pattern as the format defines", "[quant][ggml]") {
  for (bool bf16 : {false, true}) {
    const Index rows = 3, cols = 1000;
    const auto h = random_halves(static_cast<std::size_t>(rows * cols), bf16, 11);
    const auto w =
        GgmlWeights::view(bf16 ? GgmlType::kBF16 : GgmlType::kF16, rows, cols, std::as_bytes(std::span(h)), "w");
    std::vector<float> out(static_cast<std::size_t>(cols));
    for (Index r = 0; r < rows; ++r) {
      inferkit::ggml_dequantize_row(w, r, out);
      for (Index c = 0; c < cols; ++c) {
        const std::uint16_t b = h[static_cast<std::size_t>(r * cols + c)];
        const double ref = bf16 ? decode_bf16(b) : decode_f16(b);
        INFO((bf16 ? "BF16 " : "F16 ") << std::hex << b);
        REQUIRE(static_cast<double>(out[static_cast<std::size_t>(c)]) == ref);
        REQUIRE(std::signbit(out[static_cast<std::size_t>(c)]) == ((b >> 15) != 0));
      }
    }
  }
  std::vector<float> out(3);
  const std::vector<float> v(6, 2.0f);
  const auto w = GgmlWeights::view(GgmlType::kF32, 2, 3, std::as_bytes(std::span(v)), "w");
  inferkit::ggml_dequantize_row(w, 1, out);
  CHECK(out == std::vector<float>(3, 2.0f));
  CHECK_THROWS_AS(inferkit::ggml_dequantize_row(w, 2, out), std::out_of_range);
  std::vector<float> short_out(2);
  CHECK_THROWS_WITH(inferkit::ggml_dequantize_row(w, 0, short_out), Catch::Matchers::Contains("out.size() = 2"));
}

TEST_CASE("ggml_matvec / ggml_matmul, plain types: fp64 reference, same bits on any thread count", "[quant][ggml]") {
  const std::vector<std::pair<Index, Index>> shapes = {{1, 1}, {5, 3}, {17, 33}, {40, 130}, {70, 1000}, {33, 257}};
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    for (auto [rows, cols] : shapes) {
      const quant_test::Mat m = quant_test::normal(rows, cols, 5, 0.5f);
      std::vector<float> exact;
      const auto bytes = plain_bytes(t, m, exact);
      const auto w = GgmlWeights::view(t, rows, cols, bytes, "w");
      const Index T = 7;
      const quant_test::Mat x = quant_test::normal(T, cols, 9, 2.0f);
      INFO(inferkit::ggml_type_name(t) << " " << rows << " x " << cols);
      // Float accumulation of K products: |error| <= gamma_K sum |w x| (Higham), gamma_K < 1.01 K u.
      const auto check_row = [&](const float* y, const float* xr) {
        for (Index n = 0; n < rows; ++n) {
          double ref = 0, mag = 0;
          for (Index k = 0; k < cols; ++k) {
            const double p = double(exact[static_cast<std::size_t>(n * cols + k)]) * xr[k];
            ref += p;
            mag += std::abs(p);
          }
          REQUIRE(std::abs(double(y[n]) - ref) <= 1.01 * double(cols) * quant_test::kEps * mag + 1e-30);
        }
      };
      std::vector<float> y1(static_cast<std::size_t>(rows));
      inferkit::ggml_matvec(w, std::span(x.row(0), static_cast<std::size_t>(cols)), y1, 1);
      check_row(y1.data(), x.row(0));
      quant_test::Mat y(T, rows), y3(T, rows);
      inferkit::ggml_matmul(w, x.view(), y.mut(), 1);
      inferkit::ggml_matmul(w, x.view(), y3.mut(), 3);
      for (Index i = 0; i < T; ++i) check_row(y.row(i), x.row(i));
      CHECK(y.v == y3.v);
      CHECK(std::memcmp(y1.data(), y.row(0), static_cast<std::size_t>(rows) * 4) == 0);
    }
  }
}

TEST_CASE("ggml_matvec / ggml_matmul: shape, thread and activation errors", "[quant][ggml]") {
  using Catch::Matchers::Contains;
  const std::vector<float> v(12, 1.0f);
  const auto w = GgmlWeights::view(GgmlType::kF32, 3, 4, std::as_bytes(std::span(v)), "w");
  std::vector<float> x(4, 1.0f), y(3), bad_x(5);
  CHECK_THROWS_WITH(inferkit::ggml_matvec(w, bad_x, y, 1), Contains("x.size() = 5"));
  CHECK_THROWS_WITH(inferkit::ggml_matvec(w, x, bad_x, 1), Contains("y.size() = 5"));
  CHECK_THROWS_WITH(inferkit::ggml_matvec(w, x, y, -1), Contains("num_threads = -1"));
  x[2] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(inferkit::ggml_matvec(w, x, y, 1), Contains("x[2] = inf"));
  quant_test::Mat X(2, 4, 1.0f), Y(2, 3), Ybad(2, 2);
  X(1, 3) = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(inferkit::ggml_matmul(w, X.view(), Ybad.mut(), 1), Contains("y.cols() = 2"));
  CHECK_THROWS_WITH(inferkit::ggml_matmul(w, X.view(), Y.mut(), 1), Contains("x(1, 3) = nan"));
  if (!inferkit::quant_kernel_available(inferkit::QuantKernel::kAvx512Vnni))
    CHECK_THROWS_WITH(inferkit::ggml_matvec(w, std::vector<float>(4), y, 1, inferkit::QuantKernel::kAvx512Vnni),
                      Contains("kernel = avx512vnni"));
}
