#include "attention/batch_test_util.hpp"
#include "inferkit/attention/shifted_kv.hpp"

#include <limits>

using test::Case;

TEST_CASE("ShiftedKv presents a cache's tokens at shifted positions", "[attention][shifted]") {
  // Tokens stored in a paged table (positions from 0) and shifted by 300 must attend as the same
  // K/V at positions 300.. in a dense source (fp64 reference), for decode rows and a causal chunk.
  const Index hkv = 2, d = 16, n = 250;
  test::PagedBatch<float> paged(hkv, d, 16, 32);
  paged.add();
  paged.append(0, n, 11);
  const inferkit::ShiftedKv shifted(paged.tables[0].source(0), 300);
  CHECK(shifted.num_tokens() == n);
  CHECK(shifted.num_blocks() == paged.tables[0].source(0).num_blocks());
  CHECK(inferkit::last_position(shifted) == 300 + n - 1);
  for (Index b = 0; b < shifted.num_blocks(); ++b)  // every block keeps its tokens, 300 later
    CHECK(shifted.block(1, b).positions[0] == 300 + paged.tables[0].source(0).block(1, b).positions[0]);
  // The same rows as one dense [tokens, heads, d] tensor at first position 300.
  std::vector<float> k(static_cast<std::size_t>(n * hkv * d)), v(k.size());
  const auto src = paged.tables[0].source(0);
  for (Index b = 0, t0 = 0; b < src.num_blocks(); t0 += src.block(0, b).num_tokens, ++b)
    for (Index h = 0; h < hkv; ++h) {
      const auto blk = src.block(h, b);
      for (Index j = 0; j < blk.num_tokens; ++j)
        for (Index c = 0; c < d; ++c) {
          k[static_cast<std::size_t>(((t0 + j) * hkv + h) * d + c)] = blk.keys.data[j * d + c];
          v[static_cast<std::size_t>(((t0 + j) * hkv + h) * d + c)] = blk.values.data[j * d + c];
        }
    }
  const inferkit::DenseKv<float> dense({k.data(), n, hkv, d}, {v.data(), n, hkv, d}, 300);
  for (Index tq : {1, 20}) {
    const auto q = test::random_normal(static_cast<std::size_t>(tq * 4 * d), static_cast<std::uint32_t>(tq));
    std::vector<float> got(q.size()), want(q.size()), lg(static_cast<std::size_t>(tq * 4)), lw(lg.size());
    inferkit::AttentionOptions opt;
    opt.window = 100;
    opt.alibi = true;
    const inferkit::Tensor3View<const float> qv(q.data(), tq, 4, d);
    inferkit::attention(qv, shifted, {got.data(), tq, 4, d}, {lg.data(), tq, 4}, opt);
    inferkit::attention_reference(qv, dense, {want.data(), tq, 4, d}, {lw.data(), tq, 4}, opt);
    CHECK(test::max_abs_diff(got, want) < 2e-5);
    CHECK(test::max_abs_diff(lg, lw) < 8e-5);
  }
  // Explicit positions cannot be shifted; positions must stay in int32.
  const std::vector<std::int32_t> pos(static_cast<std::size_t>(n), 5);
  const inferkit::DenseKv<float> with_pos({k.data(), n, hkv, d}, {v.data(), n, hkv, d}, pos);
  CHECK_THROWS_WITH(inferkit::ShiftedKv(with_pos, 1), Catch::Contains("positions = explicit is invalid"));
  CHECK_THROWS_WITH(inferkit::ShiftedKv(dense, std::numeric_limits<std::int32_t>::max() - 10),
                    Catch::Contains("offset = 2147483637 is invalid"));
}
