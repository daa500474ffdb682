// Fuzzes the GGUF weight types (quant/ggml_*.hpp) with arbitrary tensor bytes, shapes and type
// ids (supported, unsupported and invalid), and arbitrary activations.
// Invariants:
//   - GgmlWeights::view either accepts or throws std::invalid_argument (never reads past the
//     span: ASan), and accepts only finite factors;
//   - accepted rows dequantize bit for bit as the independent decoder of the tests says
//     (tests/quant/ggml_test_util.hpp), and to finite values;
//   - ggml_matvec equals row 0 of ggml_matmul bit for bit, and is within the int8 road's error
//     bound of the fp64 product of the decoded weights (the bound of test_ggml_matvec.cpp);
//   - quantizing the decoded rows back into the type decodes to finite values, or is rejected
//     naming a block factor that overflows binary16.
// Seeds: tests/fuzz/corpus/fuzz_ggml_weights/ (random bytes of a few lengths; the first bytes
// choose the type, shape and lengths).

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/quant/ggml_matvec.hpp"
#include "inferkit/quant/ggml_quantize.hpp"
#include "inferkit/quant/ggml_weights.hpp"
#include "quant/ggml_test_util.hpp"

using inferkit::GgmlType;
using inferkit::Index;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  static constexpr GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,  GgmlType::kQ8_0,
                                        GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,  GgmlType::kQ5_1,
                                        GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,  GgmlType::kQ5_K,
                                        GgmlType::kQ6_K, GgmlType::kQ8_K, GgmlType::kIQ4_NL};
  const GgmlType t = in.ConsumeBool() ? kTypes[in.ConsumeIntegralInRange<int>(0, 14)]
                                      : static_cast<GgmlType>(in.ConsumeIntegralInRange<std::uint32_t>(0, 50));
  const Index rows = in.ConsumeIntegralInRange<Index>(0, 3);
  const Index cols =
      in.ConsumeBool() ? 256 * in.ConsumeIntegralInRange<Index>(0, 2) : in.ConsumeIntegralInRange<Index>(0, 600);
  const std::vector<std::uint8_t> bytes =
      in.ConsumeBytes<std::uint8_t>(in.ConsumeIntegralInRange<std::size_t>(0, 3 * 600 * 4));
  inferkit::GgmlWeights w;
  if (!fuzz::ok([&] { w = inferkit::GgmlWeights::view(t, rows, cols, std::as_bytes(std::span(bytes)), "fuzz"); }))
    return 0;
  FUZZ_CHECK(inferkit::ggml_weights_supported(t) && w.bytes().size() == bytes.size());

  // Decoded weights (value, offset magnitude) by the tests' decoder, or the plain values.
  const bool plain = inferkit::detail::ggml_plain_float(t);
  std::vector<ggml_test::Weight> dec;
  if (plain) {
    std::vector<float> f(static_cast<std::size_t>(rows * cols));
    inferkit::detail::ggml_plain_row_to_float(t, w.bytes().data(), rows * cols, f.data());
    for (float v : f) dec.push_back({v, 0.0});
  } else {
    const Index bs = inferkit::ggml_block_size(t), bb = inferkit::ggml_block_bytes(t);
    for (Index i = 0; i < rows * cols / bs; ++i) {
      const auto b = ggml_test::decode(t, bytes.data() + i * bb);
      dec.insert(dec.end(), b.begin(), b.end());
    }
  }
  FUZZ_CHECK(static_cast<Index>(dec.size()) == rows * cols);
  std::vector<float> row(static_cast<std::size_t>(cols)), all(static_cast<std::size_t>(rows * cols));
  for (Index r = 0; r < rows; ++r) {
    inferkit::ggml_dequantize_row(w, r, row);
    for (Index k = 0; k < cols; ++k) {
      FUZZ_CHECK(std::isfinite(row[static_cast<std::size_t>(k)]));
      FUZZ_CHECK(row[static_cast<std::size_t>(k)] == static_cast<float>(dec[static_cast<std::size_t>(r * cols + k)].w));
      all[static_cast<std::size_t>(r * cols + k)] = row[static_cast<std::size_t>(k)];
    }
  }

  std::vector<float> x(static_cast<std::size_t>(cols));
  for (auto& v : x) v = in.ConsumeFloatingPointInRange<float>(-1e4f, 1e4f);
  std::vector<float> y(static_cast<std::size_t>(rows)), y2(static_cast<std::size_t>(2 * rows));
  std::vector<float> x2(2 * x.size());
  std::copy(x.begin(), x.end(), x2.begin());
  std::copy(x.begin(), x.end(), x2.begin() + cols);
  const int threads = in.ConsumeIntegralInRange<int>(1, 3);
  if (fuzz::ok([&] { inferkit::ggml_matvec(w, x, y, threads); })) {
    inferkit::ggml_matmul(w, {x2.data(), 2, cols}, {y2.data(), 2, rows}, threads);
    FUZZ_CHECK(std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)) == 0);
    FUZZ_CHECK(std::memcmp(y.data(), y2.data() + rows, y.size() * sizeof(float)) == 0);
    const Index block = plain ? 1 : inferkit::ggml_block_size(t);
    for (Index n = 0; n < rows; ++n) {
      double ref = 0, quant = 0, mag = 0;
      for (Index b = 0; b < cols / block; ++b) {
        double amax = 0;
        for (Index k = b * block; k < (b + 1) * block; ++k) amax = std::max(amax, std::abs(double(x[k])));
        const double dx = plain ? 0.0 : amax / 127;
        for (Index k = b * block; k < (b + 1) * block; ++k) {
          const auto& d = dec[static_cast<std::size_t>(n * cols + k)];
          ref += d.w * x[k];
          quant += dx * std::abs(d.w);
          mag += (std::abs(d.w) + d.offset) * (std::abs(double(x[k])) + dx);
        }
      }
      const double bound = 0.5001 * quant + 2.0 * double(cols + 16) * 0x1p-24 * mag;
      if (std::isfinite(y[static_cast<std::size_t>(n)]))
        FUZZ_CHECK(std::abs(double(y[static_cast<std::size_t>(n)]) - ref) <= bound);
      else
        FUZZ_CHECK(mag > 1e36);  // only an overflowing float sum may leave the float range
    }
  }
  if (rows > 0 && cols > 0) {  // rejected only when a block's scale overflows binary16
    inferkit::GgmlWeights q;
    std::string what;
    if (fuzz::ok([&] { q = inferkit::ggml_quantize(t, {all.data(), rows, cols}, "fuzz", threads); }, &what)) {
      for (Index r = 0; r < rows; ++r) {
        inferkit::ggml_dequantize_row(q, r, row);
        for (float v : row) FUZZ_CHECK(std::isfinite(v));
      }
    } else {
      FUZZ_CHECK(what.find("factor") != std::string::npos && what.find("inf") != std::string::npos);  // +-inf
    }
  }
  return 0;
}
