// quant/ggml_matvec.hpp on the block types: the int8 road against fp64 products of the weights
// an independent decoder gives (ggml_test_util.hpp), within the bound the activation rounding
// and float sums allow; identical bits on any thread count, for matvec and matmul rows, and
// (integer sums being exact) between the AVX2 and VNNI paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ggml_test_util.hpp"
#include "inferkit/quant/ggml_matvec.hpp"
#include "quant_test_util.hpp"

using inferkit::GgmlType;
using inferkit::GgmlWeights;
using inferkit::Index;
using inferkit::QuantKernel;

namespace {

// The activation block of the int8 road: 32 for the legacy types, 256 for the K-quants.
Index activation_block(GgmlType t) { return inferkit::ggml_block_size(t); }

struct Decoded {
  Index rows, cols;
  std::vector<ggml_test::Weight> w;
  const ggml_test::Weight& at(Index n, Index k) const { return w[static_cast<std::size_t>(n * cols + k)]; }
};

Decoded decode_all(GgmlType t, const std::vector<std::uint8_t>& v, Index rows, Index cols) {
  Decoded d{rows, cols, {}};
  const Index bs = inferkit::ggml_block_size(t), bytes = inferkit::ggml_block_bytes(t);
  for (Index i = 0; i < rows * cols / bs; ++i) {
    const auto b = ggml_test::decode(t, v.data() + i * bytes);
    d.w.insert(d.w.end(), b.begin(), b.end());
  }
  return d;
}

// |y - sum_k w_k x_k| <= 0.5001 sum_b dx_b sum_{k in b} |w_k|    (activation rounding, dx_b = max|x| / 127)
//                      + 2 (blocks + cols / 16 + 16) u S,        (float sums and products)
// S = sum_k (|w_k| + |offset_k|) (|x_k| + dx_b) bounding every intermediate term.
void check_row(const Decoded& d, Index n, const float* x, float y, Index block) {
  double ref = 0, quant = 0, mag = 0;
  for (Index b = 0; b < d.cols / block; ++b) {
    double amax = 0;
    for (Index k = b * block; k < (b + 1) * block; ++k) amax = std::max(amax, std::abs(double(x[k])));
    const double dx = amax / 127;
    for (Index k = b * block; k < (b + 1) * block; ++k) {
      const auto& w = d.at(n, k);
      ref += w.w * x[k];
      quant += dx * std::abs(w.w);
      mag += (std::abs(w.w) + w.offset) * (std::abs(double(x[k])) + dx);
    }
  }
  const double bound = 0.5001 * quant + 2.0 * double(d.cols / block + d.cols / 16 + 16) * quant_test::kEps * mag;
  INFO("row " << n << " y " << y << " ref " << ref << " bound " << bound);
  REQUIRE(std::abs(double(y) - ref) <= bound);
}

std::vector<QuantKernel> paths() { return inferkit::available_quant_kernels(); }

}  // namespace

TEST_CASE("ggml_matvec / ggml_matmul, block types: fp64 reference on every path", "[quant][ggml]") {
  for (GgmlType t : ggml_test::block_types()) {
    const Index bs = inferkit::ggml_block_size(t);
    for (auto [rows, blocks] : std::vector<std::pair<Index, Index>>{{1, 1}, {5, 2}, {19, 3}, {40, 8}}) {
      const Index cols = blocks * bs;
      const auto v = ggml_test::random_blocks(t, static_cast<std::size_t>(rows * blocks), 7, 0.02);
      const auto w = GgmlWeights::view(t, rows, cols, std::as_bytes(std::span(v)), "w");
      const Decoded d = decode_all(t, v, rows, cols);
      const Index T = 6;
      quant_test::Mat x = quant_test::normal(T, cols, 5, 1.0f);
      for (Index k = 0; k < cols; k += 13) x(1, k) *= 30.0f;            // outliers widen dx_b
      std::fill(x.v.begin() + 2 * cols, x.v.begin() + 3 * cols, 0.0f);  // an all-zero row
      for (QuantKernel k : paths()) {
        INFO(inferkit::ggml_type_name(t) << " " << rows << " x " << cols << " on " << inferkit::quant_kernel_name(k));
        std::vector<float> y1(static_cast<std::size_t>(rows));
        inferkit::ggml_matvec(w, std::span(x.row(0), static_cast<std::size_t>(cols)), y1, 1, k);
        for (Index n = 0; n < rows; ++n)
          check_row(d, n, x.row(0), y1[static_cast<std::size_t>(n)], activation_block(t));
        quant_test::Mat y(T, rows, -1.0f), y2(T, rows, -2.0f);
        inferkit::ggml_matmul(w, x.view(), y.mut(), 1, k);
        inferkit::ggml_matmul(w, x.view(), y2.mut(), 3, k);
        for (Index i = 0; i < T; ++i)
          for (Index n = 0; n < rows; ++n) check_row(d, n, x.row(i), y(i, n), activation_block(t));
        for (Index n = 0; n < rows; ++n) REQUIRE(y(2, n) == 0.0f);
        CHECK(y.v == y2.v);
        CHECK(std::memcmp(y1.data(), y.row(0), static_cast<std::size_t>(rows) * 4) == 0);
        std::vector<float> y3(y1.size());  // decode on 2 threads (4-row passes, then the tail rows)
        inferkit::ggml_matvec(w, std::span(x.row(1), static_cast<std::size_t>(cols)), y3, 2, k);
        CHECK(std::memcmp(y3.data(), y.row(1), static_cast<std::size_t>(rows) * 4) == 0);
      }
    }
  }
}

TEST_CASE("ggml_matmul, block types: extreme factors, maximum codes, many tokens, threads", "[quant][ggml]") {
  for (GgmlType t : ggml_test::block_types()) {
    const Index bs = inferkit::ggml_block_size(t);
    const Index rows = 37, cols = (bs == 32 ? 24 : 3) * bs, T = 70;
    for (auto [scale, codes] : std::vector<std::pair<double, ggml_test::Codes>>{
             {40000.0, ggml_test::Codes::kMax}, {1e-7, ggml_test::Codes::kRandom}, {0.0, ggml_test::Codes::kRandom}}) {
      const auto v = ggml_test::random_blocks(t, static_cast<std::size_t>(rows * cols / bs), 23, scale, codes);
      const auto w = GgmlWeights::view(t, rows, cols, std::as_bytes(std::span(v)), "w");
      const Decoded d = decode_all(t, v, rows, cols);
      const quant_test::Mat x = quant_test::normal(T, cols, 8, scale == 40000.0 ? 1e-3f : 1.0f);
      std::vector<std::vector<float>> per_path;
      for (QuantKernel k : paths()) {
        INFO(inferkit::ggml_type_name(t) << " scale " << scale << " on " << inferkit::quant_kernel_name(k));
        quant_test::Mat y(T, rows), y2(T, rows);
        inferkit::ggml_matmul(w, x.view(), y.mut(), 1, k);
        inferkit::ggml_matmul(w, x.view(), y2.mut(), 2, k);
        REQUIRE(y.v == y2.v);
        for (Index i = 0; i < T; i += 3)
          for (Index n = 0; n < rows; ++n) check_row(d, n, x.row(i), y(i, n), activation_block(t));
        if (k != QuantKernel::kScalar) per_path.push_back(y.v);
      }
      for (std::size_t p = 1; p < per_path.size(); ++p) CHECK(per_path[p] == per_path[0]);  // AVX2 == VNNI
    }
  }
}

// The 32-weight kernels (detail/ggml_legacy_kernels.hpp) run Q8_0 two blocks and the nibble
// types four blocks per step, 4 rows per decode pass on VNNI, then the leftover blocks and rows
// one by one: block counts with every remainder mod 4 (5, 7, 13; 4 and 8 have none) and row
// counts with every remainder mod 4 and mod the 16-row work item, each row against fp64, the
// decode identical on 1, 2 and 3 threads and to the matmul row, and the paths equal.
TEST_CASE("ggml_matvec, legacy blocks: block and row remainders, thread counts, paths", "[quant][ggml]") {
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    for (Index blocks : {4, 5, 7, 8, 13}) {
      for (Index rows : {1, 3, 6, 18, 37}) {
        const Index cols = 32 * blocks;
        const auto v = ggml_test::random_blocks(t, static_cast<std::size_t>(rows * blocks), 11 + blocks, 0.03);
        const auto w = GgmlWeights::view(t, rows, cols, std::as_bytes(std::span(v)), "w");
        const Decoded d = decode_all(t, v, rows, cols);
        quant_test::Mat x = quant_test::normal(2, cols, 9 + rows, 1.0f);
        for (Index k = 0; k < cols; k += 7) x(0, k) *= -20.0f;
        std::vector<std::vector<float>> per_path;
        for (QuantKernel k : paths()) {
          INFO(inferkit::ggml_type_name(t) << " " << rows << " x " << cols << " on " << inferkit::quant_kernel_name(k));
          const std::span<const float> x0(x.row(0), static_cast<std::size_t>(cols));
          std::vector<float> y1(static_cast<std::size_t>(rows)), y2(y1.size()), y3(y1.size());
          inferkit::ggml_matvec(w, x0, y1, 1, k);
          inferkit::ggml_matvec(w, x0, y2, 2, k);
          inferkit::ggml_matvec(w, x0, y3, 3, k);
          for (Index n = 0; n < rows; ++n) check_row(d, n, x.row(0), y1[static_cast<std::size_t>(n)], 32);
          CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0);
          CHECK(std::memcmp(y1.data(), y3.data(), y1.size() * 4) == 0);
          quant_test::Mat y(2, rows);
          inferkit::ggml_matmul(w, x.view(), y.mut(), 2, k);
          CHECK(std::memcmp(y1.data(), y.row(0), y1.size() * 4) == 0);
          for (Index n = 0; n < rows; ++n) check_row(d, n, x.row(1), y(1, n), 32);
          if (k != QuantKernel::kScalar) per_path.push_back(y1);
        }
        for (std::size_t p = 1; p < per_path.size(); ++p) CHECK(per_path[p] == per_path[0]);  // AVX2 == VNNI
      }
    }
  }
}

TEST_CASE("ggml_matvec_float: every type within float rounding of fp64, any thread count", "[quant][ggml]") {
  std::vector<GgmlType> types = ggml_test::block_types();
  for (GgmlType t : types) {
    const Index bs = inferkit::ggml_block_size(t), rows = 21, cols = 3 * 256;
    const auto v = ggml_test::random_blocks(t, static_cast<std::size_t>(rows * cols / bs), 31, 0.05);
    const auto w = GgmlWeights::view(t, rows, cols, std::as_bytes(std::span(v)), "w");
    const Decoded d = decode_all(t, v, rows, cols);
    const quant_test::Mat x = quant_test::normal(1, cols, 6, 1.0f);
    std::vector<float> y(static_cast<std::size_t>(rows)), y2(y.size());
    inferkit::ggml_matvec_float(w, std::span(x.row(0), static_cast<std::size_t>(cols)), y, 1);
    inferkit::ggml_matvec_float(w, std::span(x.row(0), static_cast<std::size_t>(cols)), y2, 2);
    CHECK(y == y2);
    for (Index n = 0; n < rows; ++n) {
      double ref = 0, mag = 0;
      for (Index k = 0; k < cols; ++k) {
        ref += d.at(n, k).w * x(0, k);
        mag += std::abs(d.at(n, k).w * x(0, k));
      }
      INFO(inferkit::ggml_type_name(t) << " row " << n);
      // Float sum of K products of exactly dequantized weights: gamma_K sum |w x| (Higham).
      REQUIRE(std::abs(double(y[static_cast<std::size_t>(n)]) - ref) <= 1.01 * double(cols) * quant_test::kEps * mag);
    }
  }
}
