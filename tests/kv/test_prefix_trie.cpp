#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/dense_cache.hpp"
#include "inferkit/kv/prefix_trie.hpp"
#include "kv/kv_test_util.hpp"

using inferkit::BlockId;
using inferkit::Index;
using inferkit::TokenId;

TEST_CASE("block pool: budget, reference counts, explicit exhaustion", "[kv][paged]") {
  inferkit::BlockPool<float> pool({1, 1, 4, 2, 3});
  const auto a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  REQUIRE((a && b && c));
  CHECK_FALSE(pool.allocate().has_value());  // exhausted: a result, not a crash
  CHECK(pool.bytes_in_use() == 3 * pool.block_bytes());
  pool.retain(*a);
  pool.release(*a);
  CHECK(pool.refcount(*a) == 1);
  pool.release(*a);
  CHECK(pool.refcount(*a) == 0);
  CHECK(pool.allocate().has_value());
  CHECK_THROWS_WITH(pool.release(*a == 0 ? 5 : 7), Catch::Contains("block"));
}

TEST_CASE("attention over a block table equals attention over a dense cache", "[kv][paged]") {
  const Index hkv = 2, hq = 4, d = 16, tokens = 75;
  const auto k = test::random_normal(tokens * hkv * d, 1), v = test::random_normal(tokens * hkv * d, 2);
  const auto q = test::random_normal(3 * hq * d, 3);
  inferkit::DenseKvCache<float> dense(1, hkv, d, tokens);
  dense.append(0, {k.data(), tokens, hkv, d}, {v.data(), tokens, hkv, d});
  for (Index page : {1, 5, 16}) {
    inferkit::BlockPool<float> pool({1, hkv, d, page, 200});
    inferkit::BlockTable<float> table(pool);
    for (Index t = 0; t < tokens; t += 7) {  // appended in uneven chunks
      const Index n = std::min<Index>(7, tokens - t);
      REQUIRE(table.reserve(n));
      table.write(0, {k.data() + t * hkv * d, n, hkv, d}, {v.data() + t * hkv * d, n, hkv, d});
      table.commit(n);
    }
    std::vector<float> a(q.size()), b(q.size());
    inferkit::Tensor3View<const float> qv(q.data(), 3, hq, d);
    inferkit::attention(qv, table.source(0), {a.data(), 3, hq, d});
    inferkit::attention(qv, dense.source(0), {b.data(), 3, hq, d});
    INFO("page " << page);
    CHECK(test::max_abs_diff(a, b) < 1e-6);
  }
}

TEST_CASE("a forked table copies a shared partial block before writing into it", "[kv][paged]") {
  inferkit::BlockPool<float> pool({1, 1, 2, 4, 10});
  inferkit::BlockTable<float> a(pool);
  std::vector<float> row{1, 2, 3, 4, 5, 6};
  REQUIRE(a.reserve(3));
  a.write(0, {row.data(), 3, 1, 2}, {row.data(), 3, 1, 2});
  a.commit(3);
  inferkit::BlockTable<float> b = a;  // fork: both hold the partial block
  CHECK(pool.refcount(a.blocks()[0]) == 2);
  std::vector<float> other{9, 9};
  REQUIRE(b.reserve(1));
  b.write(0, {other.data(), 1, 1, 2}, {other.data(), 1, 1, 2});
  b.commit(1);
  CHECK(a.blocks()[0] != b.blocks()[0]);
  CHECK(pool.refcount(a.blocks()[0]) == 1);
  CHECK(pool.key_rows(b.blocks()[0], 0, 0)[0] == 1.0f);  // copied prefix
  CHECK(pool.key_rows(b.blocks()[0], 0, 0)[6] == 9.0f);  // the new token
  REQUIRE(a.reserve(1));                                 // a's block is its own now: written in place
  CHECK(a.blocks().size() == 1);
}

TEST_CASE("share_page swaps a full page's block for another copy of it", "[kv][paged]") {
  inferkit::BlockPool<float> pool({1, 1, 1, 2, 8});
  inferkit::BlockTable<float> t(pool);
  REQUIRE(t.reserve(3));
  t.commit(3);
  const BlockId mine = t.blocks()[0], cached = *pool.allocate();
  t.share_page(0, cached);
  CHECK(t.blocks()[0] == cached);
  CHECK(pool.refcount(cached) == 2);
  CHECK(pool.refcount(mine) == 0);  // freed
  t.share_page(0, cached);          // sharing the block already there keeps it alive
  CHECK(pool.refcount(cached) == 2);
  CHECK_THROWS_WITH(t.share_page(1, cached), Catch::Contains("page = 1"));  // the partial page
  CHECK_THROWS_WITH(t.share_page(0, mine), Catch::Contains("not allocated"));
  pool.release(cached);
  t.clear();
  CHECK(pool.used_blocks() == 0);
}

TEST_CASE("exact identity and exact tokens: one difference stops the match", "[kv][trie]") {
  const Index page = 4;
  inferkit::BlockPool<float> pool({1, 1, 1, page, 64});
  inferkit::PrefixTrie<float> trie(pool);
  const inferkit::ContextIdentity model_a{"model-a", "", "rope=10000", 0}, model_b{"model-b", "", "rope=10000", 0},
      salted{"model-a", "", "rope=10000", 7};
  std::vector<TokenId> toks(12);
  for (int i = 0; i < 12; ++i) toks[i] = 100 + i;
  std::vector<BlockId> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(*pool.allocate());
  CHECK(trie.insert(model_a, toks, blocks) == 3);
  for (BlockId b : blocks) pool.release(b);  // the trie keeps them alive
  CHECK(pool.used_blocks() == 3);
  CHECK(trie.peek(model_a, toks) == 12);
  auto diff = toks;
  diff[0] = 1;
  CHECK(trie.peek(model_a, diff) == 0);  // position 0
  diff = toks;
  diff[4] = 1;
  CHECK(trie.peek(model_a, diff) == 4);  // first token of the second page
  diff = toks;
  diff[11] = 1;
  CHECK(trie.peek(model_a, diff) == 8);  // the last token
  CHECK(trie.peek(model_b, toks) == 0);  // same tokens, another model
  CHECK(trie.peek(salted, toks) == 0);   // same model, another salt
  const std::vector<TokenId> partial(toks.begin(), toks.begin() + 7);
  CHECK(trie.peek(model_a, partial) == 4);  // whole pages only
}

TEST_CASE("eviction: least recently used leaves first, parents after their children, never pinned", "[kv][trie]") {
  inferkit::BlockPool<float> pool({1, 1, 1, 1, 64});
  inferkit::PrefixTrie<float> trie(pool);
  const inferkit::ContextIdentity id{"m"};
  const auto put = [&](std::vector<TokenId> t) {
    std::vector<BlockId> b;
    for (std::size_t i = 0; i < t.size(); ++i) b.push_back(*pool.allocate());
    trie.insert(id, t, b);
    for (BlockId x : b) pool.release(x);
  };
  put({1});
  put({2});
  put({3, 4});
  auto m = trie.match(id, std::vector<TokenId>{2});
  trie.release(m.handle);  // 2 is now the most recent
  CHECK(trie.evict(1) == 1);
  CHECK(trie.peek(id, std::vector<TokenId>{1}) == 0);  // the oldest leaf went first
  CHECK(trie.evict(1) == 1);
  CHECK(trie.peek(id, std::vector<TokenId>{3, 4}) == 1);  // then the leaf 4; its parent 3 is a leaf now
  auto pinned = trie.match(id, std::vector<TokenId>{3});
  CHECK(trie.evict(10) == 1);  // only 2 can go: 3 is pinned
  CHECK(trie.peek(id, std::vector<TokenId>{3}) == 1);
  trie.release(pinned.handle);
  CHECK(trie.evict(10) == 1);
  CHECK(trie.cached_pages() == 0);
  CHECK(pool.used_blocks() == 0);
}

TEST_CASE("extend feeds pages one at a time below a pinned path", "[kv][trie]") {
  const Index page = 2;
  inferkit::BlockPool<float> pool({1, 1, 1, page, 16});
  inferkit::PrefixTrie<float> trie(pool);
  const inferkit::ContextIdentity id{"m"}, other{"m", "", "", 1};
  const std::vector<TokenId> toks{1, 2, 3, 4, 5, 6};
  const auto page_of = [&](Index p) {
    return std::span<const TokenId>(toks).subspan(static_cast<std::size_t>(p * page), 2);
  };
  // A sequence that matched nothing feeds its pages as they fill.
  inferkit::PrefixTrie<float>::Handle h;
  std::vector<BlockId> own;
  for (Index p = 0; p < 2; ++p) {
    own.push_back(*pool.allocate());
    CHECK(trie.extend(id, h, page_of(p), own.back()) == own.back());
    CHECK(pool.refcount(own.back()) == 2);  // the sequence and the trie
  }
  CHECK(trie.peek(id, toks) == 4);  // the same trie insert() would build
  CHECK(trie.peek(other, toks) == 0);
  CHECK(trie.evict(10) == 0);  // the whole fed path is pinned
  // A second sequence matches the first page and extends with its own copy of the second:
  // the cached node keeps its block (returned, so the copy can be dropped), the copy is not
  // retained.
  auto m = trie.match(id, std::vector<TokenId>{1, 2, 9, 9});
  CHECK(m.tokens == 2);
  const BlockId copy = *pool.allocate();
  CHECK(trie.extend(id, m.handle, page_of(1), copy) == own[1]);
  CHECK(pool.refcount(copy) == 1);
  CHECK(trie.stats().inserted_pages == 2);
  trie.release(h);  // the second sequence still pins both pages
  CHECK(trie.evict(10) == 0);
  trie.release(m.handle);
  pool.release(copy);
  for (BlockId b : own) pool.release(b);
  CHECK(trie.evict(10) == 2);
  CHECK(pool.used_blocks() == 0);
  CHECK_THROWS_WITH(trie.extend(id, h, std::span<const TokenId>(toks).first(3), 0), Catch::Contains("page.size() = 3"));
}

namespace {
// The model test's pool: float rows, or quantized (KIVI-style: 4-bit keys per channel over the
// page, int8 values per token).
template <class T>
inferkit::BlockPoolConfig model_pool(Index page) {
  inferkit::BlockPoolConfig c{1, 1, 2, page, 120};
  if constexpr (inferkit::kQuantizedPool<T>)
    c.quant = {inferkit::QuantSpec{4, false, page, inferkit::QuantAxis::kPerChannel, 0},
               inferkit::QuantSpec{8, true, 2, inferkit::QuantAxis::kPerToken, 0}};
  return c;
}
}  // namespace

TEMPLATE_TEST_CASE("randomized operations keep the trie, the pool and the holders consistent", "[kv][trie][model]",
                   float, inferkit::QuantizedKv) {
  using T = TestType;
  std::mt19937 rng(12345);
  for (Index page : {1, 3, 16}) {
    INFO("page " << page);
    inferkit::BlockPool<T> pool(model_pool<T>(page));
    inferkit::PrefixTrie<T> trie(pool);
    const std::vector<inferkit::ContextIdentity> ids{{"m1"}, {"m2"}, {"m1", "lora"}};
    // Prompts are built from shared "system prompts" plus random suffixes, so they share pages.
    std::vector<std::vector<TokenId>> systems(4);
    for (auto& s : systems)
      for (Index i = 0; i < 2 * page + 1; ++i) s.push_back(static_cast<TokenId>(rng() % 7));
    struct Held {
      inferkit::BlockTable<T> table;
      typename inferkit::PrefixTrie<T>::Handle handle;
      std::size_t id;
      std::vector<TokenId> tokens;
    };
    std::vector<Held> live;
    std::map<std::pair<std::size_t, std::vector<TokenId>>, BlockId> pinned_pages;  // must stay cached
    for (int step = 0; step < 3000; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op < 5) {  // a request: match, then prefill the rest into fresh blocks, insert
        const std::size_t idn = rng() % ids.size();
        std::vector<TokenId> toks = systems[rng() % systems.size()];
        const Index extra = static_cast<Index>(rng() % (3 * page + 2));
        for (Index i = 0; i < extra; ++i) toks.push_back(static_cast<TokenId>(rng() % 5));
        auto m = trie.match(ids[idn], toks);
        REQUIRE(m.tokens == static_cast<Index>(m.blocks.size()) * page);
        REQUIRE(m.tokens <= static_cast<Index>(toks.size()));
        inferkit::BlockTable<T> table(pool);
        table.assign_prefix(m.blocks, m.tokens);
        const Index rest = static_cast<Index>(toks.size()) - m.tokens;
        bool ok = true;
        while (!table.reserve(rest)) {  // budget pressure: evict unpinned pages, or give up
          if (trie.evict(4) == 0) {
            ok = false;
            break;
          }
        }
        if (!ok) {
          trie.release(m.handle);
          continue;
        }
        // Token i's K row is (token, i), its V row (i, token): a matched page must hold this
        // request's tokens at their positions (within the quantization error).
        std::vector<float> kr, vr;
        for (Index i = m.tokens; i < static_cast<Index>(toks.size()); ++i) {
          kr.insert(kr.end(), {float(toks[static_cast<std::size_t>(i)]), float(i)});
          vr.insert(vr.end(), {float(i), float(toks[static_cast<std::size_t>(i)])});
        }
        table.write(0, {kr.data(), rest, 1, 2}, {vr.data(), rest, 1, 2});
        table.commit(rest);
        std::vector<float> kd, vd;
        test::dequantized_rows(table.source(0), kd, vd);
        const float tol = inferkit::kQuantizedPool<T> ? 0.45f : 0.0f;
        float err = 0.0f;
        for (Index i = 0; i < static_cast<Index>(toks.size()); ++i) {
          const float tok = float(toks[static_cast<std::size_t>(i)]);
          err = std::max({err, std::abs(kd[2 * i] - tok), std::abs(vd[2 * i + 1] - tok),
                          std::abs(kd[2 * i + 1] - float(i)) / 2, std::abs(vd[2 * i] - float(i)) / 2});
        }
        REQUIRE(err <= tol);
        trie.insert(ids[idn], toks, table.blocks());
        REQUIRE(trie.peek(ids[idn], toks) == (static_cast<Index>(toks.size()) / page) * page);
        if (rng() % 2) {
          live.push_back({std::move(table), m.handle, idn, toks});
        } else {
          trie.release(m.handle);
        }
      } else if (op < 8 && !live.empty()) {  // a request finishes
        const std::size_t j = rng() % live.size();
        trie.release(live[j].handle);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(j));
      } else {
        trie.evict(static_cast<Index>(rng() % 6));
      }
      // Invariants. Pinned (matched, unreleased) prefixes are still cached.
      for (const Held& h : live) {
        const Index pinned_tokens = h.handle.deepest < 0 ? 0 : trie.peek(ids[h.id], h.tokens);
        if (h.handle.deepest >= 0) REQUIRE(pinned_tokens >= 1);
      }
      // Reference counts equal the holders: trie nodes plus live tables.
      std::map<BlockId, Index> holders;
      for (const Held& h : live)
        for (BlockId b : h.table.blocks()) ++holders[b];
      Index used = 0;
      BlockId wrong = -1;
      for (BlockId b = 0; b < 120; ++b) {
        const Index expect = holders[b] + (trie.holds_block(b) ? 1 : 0);
        if (pool.refcount(b) != expect) wrong = b;
        used += expect > 0;
      }
      REQUIRE(wrong == -1);
      REQUIRE(pool.used_blocks() == used);
      REQUIRE(pool.bytes_in_use() == static_cast<std::size_t>(used) * pool.block_bytes());
      REQUIRE(trie.cached_pages() <= used);
    }
    for (Held& h : live) trie.release(h.handle);
  }
}

// Noticed while writing tests/fuzz/fuzz_prefix_trie: write() did not check the layer, and the
// pool's row pointers do not either, so a bad layer wrote past the pool's storage.
TEST_CASE("writing a layer the pool does not have is std::out_of_range", "[kv][paged][errors]") {
  inferkit::BlockPool<float> pool({2, 1, 2, 4, 8});
  inferkit::BlockTable<float> table(pool);
  REQUIRE(table.reserve(1));
  const float x[2] = {1.0f, 2.0f};
  CHECK_THROWS_AS(table.write(2, {x, 1, 1, 2}, {x, 1, 1, 2}), std::out_of_range);
  CHECK_THROWS_AS(table.write(-1, {x, 1, 1, 2}, {x, 1, 1, 2}), std::out_of_range);
  CHECK_NOTHROW(table.write(1, {x, 1, 1, 2}, {x, 1, 1, 2}));
  table.commit(1);
  CHECK(pool.key_rows(table.blocks()[0], 1, 0)[1] == 2.0f);
}
