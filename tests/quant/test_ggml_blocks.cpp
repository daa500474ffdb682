// quant/ggml_blocks.hpp through GgmlWeights and ggml_dequantize_row: every block type decodes
// bit for bit as an independent decoder of the format (ggml_test_util.hpp) says, on random
// blocks with factors from subnormal to the binary16 maximum, all-zero blocks and maximum codes;
// NaN / Inf factors are rejected naming the tensor, the row, the block and the factor.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "ggml_test_util.hpp"
#include "inferkit/quant/ggml_weights.hpp"

using inferkit::GgmlType;
using inferkit::GgmlWeights;
using inferkit::Index;

TEST_CASE("ggml_dequantize_row: every block type bit-exact against an independent decoder", "[quant][ggml]") {
  for (GgmlType t : ggml_test::block_types()) {
    const Index bs = inferkit::ggml_block_size(t), bytes = inferkit::ggml_block_bytes(t);
    const Index rows = 3, blocks = 4, cols = blocks * bs;
    struct Case {
      double scale;
      ggml_test::Codes codes;
    };
    for (const Case c : {Case{0.01, ggml_test::Codes::kRandom}, Case{0, ggml_test::Codes::kRandom},
                         Case{6e-8, ggml_test::Codes::kRandom}, Case{40000, ggml_test::Codes::kMax},
                         Case{1, ggml_test::Codes::kZero}, Case{0.3, ggml_test::Codes::kMax}}) {
      INFO(inferkit::ggml_type_name(t) << " scale " << c.scale << " codes " << int(c.codes));
      const auto v = ggml_test::random_blocks(t, static_cast<std::size_t>(rows * blocks), 17, c.scale, c.codes);
      const auto w = GgmlWeights::view(t, rows, cols, std::as_bytes(std::span(v)), "w");
      std::vector<float> out(static_cast<std::size_t>(cols));
      for (Index r = 0; r < rows; ++r) {
        inferkit::ggml_dequantize_row(w, r, out);
        for (Index b = 0; b < blocks; ++b) {
          const auto ref = ggml_test::decode(t, v.data() + (r * blocks + b) * bytes);
          REQUIRE(static_cast<Index>(ref.size()) == bs);
          for (Index e = 0; e < bs; ++e) {
            INFO("row " << r << " block " << b << " weight " << e);
            REQUIRE(out[static_cast<std::size_t>(b * bs + e)] ==
                    static_cast<float>(ref[static_cast<std::size_t>(e)].w));
          }
        }
      }
    }
  }
}

TEST_CASE("GgmlWeights: block types validate shape and reject NaN / Inf factors naming the tensor", "[quant][ggml]") {
  using Catch::Matchers::Contains;
  for (GgmlType t : ggml_test::block_types()) {
    const Index bs = inferkit::ggml_block_size(t), bytes = inferkit::ggml_block_bytes(t);
    INFO(inferkit::ggml_type_name(t));
    auto v = ggml_test::random_blocks(t, 6, 3, 0.5);
    CHECK_THROWS_WITH(GgmlWeights::view(t, 2, bs + 16, std::as_bytes(std::span(v)), "blk.2.ffn_down.weight"),
                      Contains("tensor 'blk.2.ffn_down.weight' cols = " + std::to_string(bs + 16)));
    CHECK_THROWS_WITH(GgmlWeights::view(t, 2, 2 * bs, std::as_bytes(std::span(v)), "o"),
                      Contains("tensor 'o' bytes = " + std::to_string(6 * bytes)));
    for (int off : ggml_test::factor_offsets(t)) {
      for (std::uint16_t bad : {std::uint16_t{0x7C00}, std::uint16_t{0x7E00}}) {
        auto b = v;
        b[static_cast<std::size_t>(4 * bytes + off)] = static_cast<std::uint8_t>(bad & 0xFF);
        b[static_cast<std::size_t>(4 * bytes + off + 1)] = static_cast<std::uint8_t>(bad >> 8);
        // 3 rows of 2 blocks: block 4 is row 2, block 0.
        CHECK_THROWS_WITH(GgmlWeights::view(t, 3, 2 * bs, std::as_bytes(std::span(b)), "blk.9.attn_v.weight"),
                          Contains("tensor 'blk.9.attn_v.weight' row 2 block 0 factor") &&
                              Contains(bad == 0x7C00 ? "= inf" : "= nan"));
      }
    }
    CHECK_NOTHROW(GgmlWeights::view(t, 3, 2 * bs, std::as_bytes(std::span(v)), "fine"));
  }
}
