#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "inferkit/attention/kv_copy.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/dense_cache.hpp"
#include "inferkit/kv/tree_compaction.hpp"

using inferkit::Index;

namespace {

constexpr Index kTreeLayers = 2, kTreeHeads = 2, kTreeDim = 16;

std::vector<float> tc_normals(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (auto& v : x) v = d(gen);
  return x;
}

// Every head of every layer of two caches holds the same bits and positions.
template <class Cache>
void tc_check_same(const Cache& a, const Cache& b, Index tokens) {
  for (Index layer = 0; layer < kTreeLayers; ++layer) {
    const auto sa = a.source(layer), sb = b.source(layer);
    REQUIRE(sa.num_tokens() == tokens);
    REQUIRE(sb.num_tokens() == tokens);
    for (Index h = 0; h < kTreeHeads; ++h) {
      std::vector<float> ka(std::size_t(tokens * kTreeDim)), va(ka.size()), kb(ka.size()), vb(ka.size());
      std::vector<std::int32_t> pa(static_cast<std::size_t>(tokens)), pb(pa.size());
      inferkit::copy_kv_head(sa, h, {ka.data(), tokens, kTreeDim}, {va.data(), tokens, kTreeDim}, pa);
      inferkit::copy_kv_head(sb, h, {kb.data(), tokens, kTreeDim}, {vb.data(), tokens, kTreeDim}, pb);
      CHECK(std::memcmp(ka.data(), kb.data(), ka.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0);
      CHECK(pa == pb);
    }
  }
}

// Rows of `count` tokens for one layer from a [tokens, heads, dim] array starting at token `first`.
inferkit::Tensor3View<const float> tc_rows(const std::vector<float>& x, Index first, Index count) {
  return {x.data() + first * kTreeHeads * kTreeDim, count, kTreeHeads, kTreeDim};
}

// A random root path of a depth-first tree of n nodes: increasing node indices.
std::vector<Index> tc_random_path(Index n, std::mt19937& gen) {
  std::vector<Index> path;
  for (Index i = 0; i < n; ++i)
    if (gen() % 3 == 0) path.push_back(i);
  return path;
}

}  // namespace

TEMPLATE_TEST_CASE("tree compaction of a dense cache equals decoding the accepted tokens one by one",
                   "[kv][tree_compaction]", float, inferkit::BFloat16) {
  std::mt19937 gen(3);
  for (int trial = 0; trial < 20; ++trial) {
    const Index prefix = Index(gen() % 50), nodes = 1 + Index(gen() % 63);
    const auto path = tc_random_path(nodes, gen);
    const Index total = prefix + nodes + 1;
    std::vector<std::vector<float>> k, v;  // per layer [total, heads, dim]
    for (Index l = 0; l < kTreeLayers; ++l) {
      k.push_back(tc_normals(std::size_t(total * kTreeHeads * kTreeDim), unsigned(trial * 10 + l)));
      v.push_back(tc_normals(std::size_t(total * kTreeHeads * kTreeDim), unsigned(trial * 10 + l + 5)));
    }
    inferkit::DenseKvCache<TestType> tree(
        {.layers = kTreeLayers, .kv_heads = kTreeHeads, .head_dim = kTreeDim, .capacity = 8});
    inferkit::DenseKvCache<TestType> seq(
        {.layers = kTreeLayers, .kv_heads = kTreeHeads, .head_dim = kTreeDim, .capacity = 8});
    for (Index l = 0; l < kTreeLayers; ++l) {
      tree.append(l, tc_rows(k[l], 0, total), tc_rows(v[l], 0, total));           // prefix + every tree row
      seq.append(l, tc_rows(k[l], 0, prefix + 1), tc_rows(v[l], 0, prefix + 1));  // prefix + root
      for (Index node : path) seq.append(l, tc_rows(k[l], prefix + 1 + node, 1), tc_rows(v[l], prefix + 1 + node, 1));
    }
    inferkit::compact_tree_path(tree, prefix, path);
    tc_check_same(tree, seq, prefix + 1 + Index(path.size()));
  }
}

TEMPLATE_TEST_CASE("tree compaction of a paged table equals decoding the accepted tokens one by one",
                   "[kv][tree_compaction]", float, inferkit::BFloat16) {
  std::mt19937 gen(4);
  inferkit::BlockPool<TestType> pool(
      {.layers = kTreeLayers, .kv_heads = kTreeHeads, .head_dim = kTreeDim, .page_size = 8, .max_blocks = 64});
  for (int trial = 0; trial < 20; ++trial) {
    const Index prefix = Index(gen() % 50), nodes = 1 + Index(gen() % 40);
    const auto path = tc_random_path(nodes, gen);
    const Index total = prefix + nodes + 1;
    std::vector<std::vector<float>> k, v;
    for (Index l = 0; l < kTreeLayers; ++l) {
      k.push_back(tc_normals(std::size_t(total * kTreeHeads * kTreeDim), unsigned(trial * 10 + l + 100)));
      v.push_back(tc_normals(std::size_t(total * kTreeHeads * kTreeDim), unsigned(trial * 10 + l + 105)));
    }
    inferkit::BlockTable<TestType> tree(pool), seq(pool);
    REQUIRE(tree.reserve(total));
    for (Index l = 0; l < kTreeLayers; ++l) tree.write(l, tc_rows(k[l], 0, total), tc_rows(v[l], 0, total));
    tree.commit(total);
    const inferkit::BlockTable<TestType> fork = tree;  // a sharer of the prefix pages (copy-on-write)
    const auto step = [&](Index first, Index count) {
      REQUIRE(seq.reserve(count));
      for (Index l = 0; l < kTreeLayers; ++l) seq.write(l, tc_rows(k[l], first, count), tc_rows(v[l], first, count));
      seq.commit(count);
    };
    step(0, prefix + 1);
    for (Index node : path) step(prefix + 1 + node, 1);
    REQUIRE(inferkit::compact_tree_path(tree, prefix, path));
    tc_check_same(tree, seq, prefix + 1 + Index(path.size()));
    CHECK(fork.num_tokens() == total);  // the sharer still sees the uncompacted rows
  }
}

TEST_CASE("tree compaction rejects paths that are not root paths", "[kv][tree_compaction][errors]") {
  inferkit::DenseKvCache<float> cache({.layers = 1, .kv_heads = kTreeHeads, .head_dim = kTreeDim, .capacity = 8});
  const auto x = tc_normals(std::size_t(6 * kTreeHeads * kTreeDim), 1);
  cache.append(0, tc_rows(x, 0, 6), tc_rows(x, 0, 6));
  const std::vector<Index> backwards{2, 1};
  CHECK_THROWS_WITH(inferkit::compact_tree_path(cache, 2, backwards), Catch::Contains("accepted_nodes[1] = 1"));
  const std::vector<Index> past{5};
  CHECK_THROWS_WITH(inferkit::compact_tree_path(cache, 2, past), Catch::Contains("slots[1] = 6"));
  CHECK(cache.length(0) == 6);  // nothing changed
}
