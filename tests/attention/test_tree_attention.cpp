#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/attention/reference.hpp"
#include "inferkit/attention/tree_attention.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/dense_cache.hpp"

using inferkit::Index;

namespace {

// A random depth-first parents array of n nodes.
std::vector<Index> random_parents(Index n, std::mt19937& gen) {
  std::vector<Index> parents, path;
  for (Index i = 0; i < n; ++i) {
    path.resize(gen() % (path.size() + 1));
    parents.push_back(path.empty() ? -1 : path.back());
    path.push_back(i);
  }
  return parents;
}

struct Shape {
  Index hq = 4, hkv = 2, d = 32;
};

// Cache holding prefix tokens then the tree's rows; q for the tree's rows.
template <class T>
struct TreeCase {
  Shape s;
  Index prefix, rows;
  std::vector<Index> parents;
  std::vector<float> k, v, q;  // [prefix + rows, hkv, d] and [rows, hq, d]
  inferkit::DenseKvCache<T> cache;
  TreeCase(Index prefix_tokens, Index nodes, std::uint32_t seed)
      : prefix(prefix_tokens),
        rows(nodes + 1),
        cache({.layers = 1, .kv_heads = s.hkv, .head_dim = s.d, .capacity = prefix_tokens + nodes + 1}) {
    std::mt19937 gen(seed);
    parents = random_parents(nodes, gen);
    const Index total = prefix + rows;
    k = test::random_normal(static_cast<std::size_t>(total * s.hkv * s.d), seed + 1);
    v = test::random_normal(static_cast<std::size_t>(total * s.hkv * s.d), seed + 2);
    q = test::random_normal(static_cast<std::size_t>(rows * s.hq * s.d), seed + 3);
    cache.append(0, {k.data(), total, s.hkv, s.d}, {v.data(), total, s.hkv, s.d});
  }
  // The root path (tree positions) of row u.
  std::vector<Index> path(Index u) const { return inferkit::tree_row_paths(parents)[static_cast<std::size_t>(u)]; }
  // K or V rows of the prefix then of row u's path, in decoding order.
  std::vector<float> gathered(const std::vector<float>& x, Index u) const {
    const std::size_t row = static_cast<std::size_t>(s.hkv * s.d);
    std::vector<float> g(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(prefix * s.hkv * s.d));
    for (Index slot : path(u)) {
      const auto at = x.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(prefix + slot) * row);
      g.insert(g.end(), at, at + static_cast<std::ptrdiff_t>(row));
    }
    return g;
  }
};

}  // namespace

TEST_CASE("tree attention in batch-invariant mode equals decoding each path token by token, bitwise",
          "[attention][tree_attention]") {
  for (const auto& [prefix, nodes, seed] :
       std::vector<std::tuple<Index, Index, std::uint32_t>>{{0, 5, 1}, {37, 12, 2}, {300, 31, 3}, {1100, 63, 4}}) {
    const std::vector<float> sinks{0.5f, -1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
    for (int variant = 0; variant < 4; ++variant) {
      inferkit::AttentionOptions opt{.batch_invariant = true};
      if (variant == 1) {
        opt.alibi = true;
        opt.softcap = 20.0f;
      }
      if (variant == 2) opt.window = 40;
      if (variant == 3) opt.sink_logits = sinks;
      TreeCase<inferkit::BFloat16> c(prefix, nodes, seed);
      const Shape s = c.s;
      std::vector<float> out(c.q.size()), lse(static_cast<std::size_t>(c.rows * s.hq));
      inferkit::tree_attention(inferkit::Tensor3View<const float>(c.q.data(), c.rows, s.hq, s.d), c.cache.source(0),
                               prefix, c.parents, inferkit::Tensor3View<float>(out.data(), c.rows, s.hq, s.d),
                               inferkit::MatrixView<float>(lse.data(), c.rows, s.hq), opt);
      for (Index u = 0; u < c.rows; ++u) {
        // Decoding: a cache holding the prefix and the path, the row as its last query.
        const auto gk = c.gathered(c.k, u), gv = c.gathered(c.v, u);
        const Index n = static_cast<Index>(gk.size()) / (s.hkv * s.d);
        inferkit::DenseKvCache<inferkit::BFloat16> seq(
            {.layers = 1, .kv_heads = s.hkv, .head_dim = s.d, .capacity = n});
        seq.append(0, {gk.data(), n, s.hkv, s.d}, {gv.data(), n, s.hkv, s.d});
        std::vector<float> ro(static_cast<std::size_t>(s.hq * s.d)), rl(static_cast<std::size_t>(s.hq));
        const std::vector<inferkit::DenseKv<inferkit::BFloat16>> src{seq.source(0)};
        const std::vector<Index> cu{0, 1};
        inferkit::attention_batch(inferkit::Tensor3View<const float>(c.q.data() + u * s.hq * s.d, 1, s.hq, s.d), cu,
                                  src, inferkit::Tensor3View<float>(ro.data(), 1, s.hq, s.d),
                                  inferkit::MatrixView<float>(rl.data(), 1, s.hq), opt);
        INFO("prefix " << prefix << " nodes " << nodes << " variant " << variant << " row " << u);
        CHECK(std::memcmp(ro.data(), out.data() + u * s.hq * s.d, ro.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(rl.data(), lse.data() + u * s.hq, rl.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("tree attention (prefix once, paths merged by LSE) matches the fp64 reference per row",
          "[attention][tree_attention]") {
  for (const auto& [prefix, nodes, seed] :
       std::vector<std::tuple<Index, Index, std::uint32_t>>{{0, 7, 11}, {64, 20, 12}, {700, 63, 13}}) {
    const std::vector<float> sinks{0.5f, -1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
    for (int variant = 0; variant < 4; ++variant) {
      inferkit::AttentionOptions opt{};
      if (variant == 1) {
        opt.alibi = true;
        opt.softcap = 20.0f;
      }
      if (variant == 2) opt.window = 50;
      if (variant == 3) opt.sink_logits = sinks;  // one sink per row, not one per merged pass
      TreeCase<float> c(prefix, nodes, seed);
      const Shape s = c.s;
      std::vector<float> out(c.q.size()), lse(static_cast<std::size_t>(c.rows * s.hq));
      inferkit::tree_attention(inferkit::Tensor3View<const float>(c.q.data(), c.rows, s.hq, s.d), c.cache.source(0),
                               prefix, c.parents, inferkit::Tensor3View<float>(out.data(), c.rows, s.hq, s.d),
                               inferkit::MatrixView<float>(lse.data(), c.rows, s.hq), opt);
      for (Index u = 0; u < c.rows; ++u) {
        const auto gk = c.gathered(c.k, u), gv = c.gathered(c.v, u);
        const Index n = static_cast<Index>(gk.size()) / (s.hkv * s.d);
        std::vector<float> ro(static_cast<std::size_t>(s.hq * s.d)), rl(static_cast<std::size_t>(s.hq));
        // The reference with the row bottom-right aligned: position n - 1 = prefix + depth.
        inferkit::attention_reference(inferkit::Tensor3View<const float>(c.q.data() + u * s.hq * s.d, 1, s.hq, s.d),
                                      inferkit::DenseKv<float>({gk.data(), n, s.hkv, s.d}, {gv.data(), n, s.hkv, s.d}),
                                      inferkit::Tensor3View<float>(ro.data(), 1, s.hq, s.d),
                                      inferkit::MatrixView<float>(rl.data(), 1, s.hq), opt);
        INFO("prefix " << prefix << " nodes " << nodes << " variant " << variant << " row " << u);
        const std::vector<float> go(out.begin() + u * s.hq * s.d, out.begin() + (u + 1) * s.hq * s.d);
        const std::vector<float> gl(lse.begin() + u * s.hq, lse.begin() + (u + 1) * s.hq);
        CHECK(test::max_abs_diff(go, ro) < 2e-5);
        CHECK(test::max_abs_diff(gl, rl) < 2e-5);
      }
    }
  }
}

TEST_CASE("tree attention rejects bad shapes and explicit positions", "[attention][tree_attention][errors]") {
  TreeCase<float> c(10, 4, 5);
  const Shape s = c.s;
  std::vector<float> out(c.q.size());
  const inferkit::Tensor3View<const float> q(c.q.data(), c.rows, s.hq, s.d);
  const inferkit::Tensor3View<float> o(out.data(), c.rows, s.hq, s.d);
  const std::vector<Index> short_parents{-1, 0};
  CHECK_THROWS_WITH(inferkit::tree_attention(q, c.cache.source(0), 10, short_parents, o),
                    Catch::Contains("q.dim0() = 5"));
  CHECK_THROWS_WITH(inferkit::tree_attention(q, c.cache.source(0), 11, c.parents, o),
                    Catch::Contains("base.num_tokens() = 15"));
  const std::vector<std::int32_t> pos(5, 3);
  CHECK_THROWS_WITH(inferkit::tree_attention(q, c.cache.source(0), 10, c.parents, o, {.query_positions = pos}),
                    Catch::Contains("query_positions"));
  const std::vector<Index> bad{-1, 3, 0, 1};
  CHECK_THROWS_WITH(inferkit::tree_attention(q, c.cache.source(0), 10, bad, o), Catch::Contains("parents[1] = 3"));
}
