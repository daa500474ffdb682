// core/ggml_type.hpp: block sizes and bytes against the block layouts the GGUF format publishes
// (ggml's block structs, restated here field by field: binary16 scales are 2 bytes, nibbles pack
// two weights per byte), the type names, and the errors for ids without a layout.

#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>

#include "inferkit/core/ggml_type.hpp"

using Catch::Matchers::Contains;
using inferkit::GgmlType;

namespace {
constexpr std::uint32_t kHalfBytes = 2;  // a binary16 scale or minimum
}

TEST_CASE("ggml block sizes and bytes follow the published block layouts", "[core][ggml_type]") {
  struct Layout {
    GgmlType type;
    std::uint32_t block;
    std::uint32_t bytes;
  };
  const Layout layouts[] = {
      {GgmlType::kF32, 1, 4},
      {GgmlType::kF16, 1, kHalfBytes},
      {GgmlType::kBF16, 1, 2},
      {GgmlType::kF64, 1, 8},
      {GgmlType::kI8, 1, 1},
      {GgmlType::kI16, 1, 2},
      {GgmlType::kI32, 1, 4},
      {GgmlType::kI64, 1, 8},
      {GgmlType::kQ4_0, 32, kHalfBytes + 32 / 2},                   // d, 32 nibbles
      {GgmlType::kQ4_1, 32, kHalfBytes + kHalfBytes + 32 / 2},      // d, m, 32 nibbles
      {GgmlType::kQ5_0, 32, kHalfBytes + 4 + 32 / 2},               // d, 32 high bits, nibbles
      {GgmlType::kQ5_1, 32, kHalfBytes + kHalfBytes + 4 + 32 / 2},  // d, m, high bits, nibbles
      {GgmlType::kQ8_0, 32, kHalfBytes + 32},                       // d, 32 int8
      {GgmlType::kQ8_1, 32, kHalfBytes + kHalfBytes + 32},          // d, s = d * sum, 32 int8
      {GgmlType::kQ2_K, 256,
       256 / 16 + 256 / 4 + kHalfBytes + kHalfBytes},                  // 4-bit scale+min per 16, 2-bit codes, d, dmin
      {GgmlType::kQ3_K, 256, 256 / 8 + 256 / 4 + 12 + kHalfBytes},     // high-bit mask, 2-bit low, 6-bit scales, d
      {GgmlType::kQ4_K, 256, kHalfBytes + kHalfBytes + 12 + 256 / 2},  // d, dmin, 6-bit scales+mins, nibbles
      {GgmlType::kQ5_K, 256, kHalfBytes + kHalfBytes + 12 + 256 / 8 + 256 / 2},  // + high-bit plane
      {GgmlType::kQ6_K, 256, 256 / 2 + 256 / 4 + 256 / 16 + kHalfBytes},  // low nibbles, high 2 bits, int8 scales, d
      {GgmlType::kQ8_K, 256, 4 + 256 + 256 / 16 * 2},                     // float d, int8 codes, int16 block sums
  };
  for (const auto& l : layouts) {
    INFO(inferkit::ggml_type_name(l.type));
    CHECK(inferkit::ggml_type_known_layout(l.type));
    CHECK(inferkit::ggml_block_size(l.type) == l.block);
    CHECK(inferkit::ggml_block_bytes(l.type) == l.bytes);
    CHECK(inferkit::ggml_row_bytes(l.type, 4096) == 4096 / l.block * l.bytes);
  }
}

TEST_CASE("ggml type ids, names and the errors of types without a layout", "[core][ggml_type]") {
  CHECK(inferkit::ggml_type_name(GgmlType::kQ4_K) == "Q4_K");
  CHECK(inferkit::ggml_type_name(GgmlType::kBF16) == "BF16");
  CHECK(static_cast<std::uint32_t>(GgmlType::kBF16) == 30);
  CHECK(static_cast<std::uint32_t>(GgmlType::kQ8_0) == 8);
  CHECK(inferkit::ggml_type_name(static_cast<GgmlType>(4)) == "unknown(4)");
  CHECK(!inferkit::ggml_type_id_valid(4));  // Q4_2, removed from ggml
  CHECK(!inferkit::ggml_type_id_valid(40));
  CHECK(inferkit::ggml_type_id_valid(16));  // IQ2_XXS: an id without a known layout
  CHECK(!inferkit::ggml_type_known_layout(GgmlType::kIQ2_XXS));
  CHECK_THROWS_WITH(inferkit::ggml_block_bytes(GgmlType::kIQ2_XXS), Contains("IQ2_XXS"));
  CHECK_THROWS_WITH(inferkit::ggml_row_bytes(GgmlType::kQ4_0, 33), Contains("33") && Contains("32"));
  CHECK(inferkit::ggml_row_bytes(GgmlType::kQ4_K, 4096) == 2304);
}
