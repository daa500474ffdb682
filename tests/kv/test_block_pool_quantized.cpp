// Quantized paged KV (BlockPool<QuantizedKv>): attention over int8 / int4 / KIVI pages equals
// the dense quantized cache (same specs, residual 0) bit for bit, through forks, copy-on-write,
// prefix sharing, eviction and block reuse; memory is exact per page; bad specs name the
// parameter.

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/prefix_trie.hpp"
#include "inferkit/kv/quantized_cache.hpp"
#include "kv/kv_test_util.hpp"

using inferkit::BlockId;
using inferkit::Index;
using inferkit::KvQuantConfig;
using inferkit::QuantAxis;
using inferkit::QuantizedKv;
using inferkit::QuantSpec;
using inferkit::TokenId;

namespace {

constexpr Index kLayers = 2, kHkv = 2, kHq = 8, kD = 64;

struct Scheme {
  std::string name;
  KvQuantConfig cfg;
};

// Paged-compatible presets: residual 0; KIVI key groups divide the page.
std::vector<Scheme> schemes(Index page) {
  const QuantSpec int8{8, true, 32, QuantAxis::kPerToken, 0}, int4{4, false, 32, QuantAxis::kPerToken, 0};
  const Index half = page % 2 == 0 ? page / 2 : page;
  return {{"int8", {int8, int8}},
          {"int4", {int4, int4}},
          {"kivi4", {QuantSpec{4, false, page, QuantAxis::kPerChannel, 0}, int4}},
          {"kivi2",
           {QuantSpec{2, false, half, QuantAxis::kPerChannel, 0}, QuantSpec{2, false, 32, QuantAxis::kPerToken, 0}}}};
}

// Token rows [tokens, kv_heads, d] of a sequence for each layer (seeded by sequence and layer).
struct Seq {
  std::vector<std::vector<float>> k, v;
  Seq(Index tokens, std::uint32_t seed) {
    for (Index l = 0; l < kLayers; ++l) {
      k.push_back(
          test::random_normal(static_cast<std::size_t>(tokens * kHkv * kD), seed * 10 + static_cast<std::uint32_t>(l)));
      v.push_back(test::random_normal(static_cast<std::size_t>(tokens * kHkv * kD),
                                      seed * 10 + 5 + static_cast<std::uint32_t>(l)));
      for (Index t = 0; t < tokens; ++t)
        k.back()[static_cast<std::size_t>((t * kHkv) * kD + 3)] *= 12.0f;  // an outlier channel
    }
  }
  inferkit::Tensor3View<const float> keys(Index l, Index from, Index n) const {
    return {k[l].data() + from * kHkv * kD, n, kHkv, kD};
  }
  inferkit::Tensor3View<const float> values(Index l, Index from, Index n) const {
    return {v[l].data() + from * kHkv * kD, n, kHkv, kD};
  }
};

template <class Table>
void append(Table& t, const Seq& s, Index from, Index to, Index chunk = 7) {
  for (Index p = from; p < to; p += chunk) {
    const Index n = std::min(chunk, to - p);
    REQUIRE(t.reserve(n));
    for (Index l = 0; l < kLayers; ++l) t.write(l, s.keys(l, p, n), s.values(l, p, n));
    t.commit(n);
  }
}
void append(inferkit::QuantizedKvCache& c, const Seq& s, Index from, Index to) {
  for (Index p = from; p < to; ++p)  // one token at a time: the dense cache's own schedule
    for (Index l = 0; l < kLayers; ++l) c.append(l, s.keys(l, p, 1), s.values(l, p, 1));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class S>
std::vector<float> attend(const S& src, Index tq, const inferkit::AttentionOptions& opt, std::uint32_t seed) {
  const auto q = test::random_normal(static_cast<std::size_t>(tq * kHq * kD), seed);
  std::vector<float> out(q.size() + static_cast<std::size_t>(tq * kHq));  // outputs, then LSE
  inferkit::attention(inferkit::Tensor3View<const float>(q.data(), tq, kHq, kD), src, {out.data(), tq, kHq, kD},
                      {out.data() + q.size(), tq, kHq}, opt);
  return out;
}

// Float rows with the block structure of another source (its blocks' decoded rows): what the
// decode kernel computes over that source if its in-register dequantization is exact.
struct FloatMirror {
  Index heads = 0, dim = 0, tokens = 0;
  std::vector<Index> sizes, firsts;
  std::vector<std::vector<float>> k, v;  // [head * blocks + block] rows
  template <class S>
  explicit FloatMirror(const S& src) : heads(src.num_kv_heads()), dim(src.head_dim()), tokens(src.num_tokens()) {
    for (Index b = 0, first = 0; b < src.num_blocks(); first += sizes.back(), ++b) {
      sizes.push_back(src.block(0, b).num_tokens);
      firsts.push_back(first);
    }
    for (Index h = 0; h < heads; ++h)
      for (Index b = 0; b < num_blocks(); ++b) {
        const auto blk = src.block(h, b);
        std::vector<float> kb(static_cast<std::size_t>(blk.num_tokens * dim)), vb(kb.size());
        const auto kr = blk.keys.load_f32(0, blk.num_tokens, dim, kb.data(), dim, false);
        const auto vr = blk.values.load_f32(0, blk.num_tokens, dim, vb.data(), dim, false);
        REQUIRE((kr.data == kb.data() && vr.data == vb.data()));
        k.push_back(std::move(kb));
        v.push_back(std::move(vb));
      }
  }
  Index num_kv_heads() const { return heads; }
  Index head_dim() const { return dim; }
  Index num_tokens() const { return tokens; }
  Index num_blocks() const { return static_cast<Index>(sizes.size()); }
  inferkit::KvBlock<inferkit::DenseRows<float>, inferkit::DenseRows<float>> block(Index h, Index b) const {
    const auto i = static_cast<std::size_t>(h * num_blocks() + b);
    return {sizes[static_cast<std::size_t>(b)],
            {k[i].data(), dim},
            {v[i].data(), dim},
            inferkit::TokenPositions{nullptr, static_cast<std::int32_t>(firsts[static_cast<std::size_t>(b)])}};
  }
};

// The paged table's attention against the dense quantized cache holding the same tokens: prefill
// (fixed key tiles) and batch-invariant decode are bitwise equal; default decode (page-sized
// tiles, codes dequantized in registers) is bitwise equal to float rows of the decoded values
// in the same blocks, and close to the dense cache.
void check_equal(const inferkit::BlockTable<QuantizedKv>& table, const inferkit::QuantizedKvCache& dense,
                 Index /*page*/) {
  REQUIRE(table.num_tokens() == dense.length(0));
  inferkit::AttentionOptions inv;
  inv.batch_invariant = true;
  for (Index l = 0; l < kLayers; ++l) {
    INFO("layer " << l);
    const auto ps = table.source(l);
    const auto ds = dense.source(l);
    CHECK(same_bits(attend(ps, 9, {}, 11), attend(ds, 9, {}, 11)));    // prefill
    CHECK(same_bits(attend(ps, 1, inv, 12), attend(ds, 1, inv, 12)));  // decode, batch-invariant
    CHECK(same_bits(attend(ps, 3, inv, 13), attend(ds, 3, inv, 13)));
    std::vector<float> k, v;
    test::dequantized_rows(ds, k, v);
    std::vector<float> pk, pv;
    test::dequantized_rows(ps, pk, pv);
    CHECK(same_bits(pk, k));  // the same decoded values: the same codes and parameters
    CHECK(same_bits(pv, v));
    const FloatMirror mirror(ps);
    for (Index tq : {1, 3}) {
      const auto got = attend(ps, tq, {}, 14), fl = attend(mirror, tq, {}, 14), de = attend(ds, tq, {}, 14);
      CHECK(same_bits(got, fl));
      CHECK(test::max_abs_diff(got, de) < 1e-5);
    }
  }
}

inferkit::BlockPoolConfig config(Index page, Index blocks, const KvQuantConfig& q) {
  inferkit::BlockPoolConfig c{kLayers, kHkv, kD, page, blocks};
  c.quant = q;
  return c;
}

}  // namespace

TEST_CASE("paged int8 / int4 / KIVI attention equals the dense quantized cache bit for bit", "[kv][paged][quantized]") {
  const Index tokens = 75, split = 38;
  const Seq x(tokens, 1), y(tokens, 2);
  for (Index page : {1, 5, 16}) {
    for (const Scheme& s : schemes(page)) {
      INFO("page " << page << " " << s.name);
      inferkit::BlockPool<QuantizedKv> pool(config(page, 4 * tokens + 8, s.cfg));
      inferkit::QuantizedKvCache dx(kLayers, kHkv, kD, s.cfg), dy(kLayers, kHkv, kD, s.cfg);
      append(dx, x, 0, tokens);
      append(dy, x, 0, split);
      append(dy, y, split, tokens);

      // A fork at a partial page: both continue, each copying the shared page on write.
      inferkit::BlockTable<QuantizedKv> a(pool);
      append(a, x, 0, split);
      inferkit::BlockTable<QuantizedKv> b = a;
      append(a, x, split, tokens, 5);
      append(b, y, split, tokens, 1);
      if (split % page != 0) CHECK(a.blocks()[split / page] != b.blocks()[split / page]);
      for (Index p = 0; p < split / page; ++p) CHECK(a.blocks()[p] == b.blocks()[p]);  // full pages stay shared
      check_equal(a, dx, page);
      check_equal(b, dy, page);
      CHECK(a.source(0).num_blocks() <= 2);  // consecutive blocks form one run (and the key tail's page ends one)

      // Prefix reuse: a's full pages cached, a new table starts from them; then every cached
      // page is evicted while the table still holds it, and freed blocks are reused.
      inferkit::PrefixTrie<QuantizedKv> trie(pool);
      std::vector<TokenId> ids(tokens);
      for (Index i = 0; i < tokens; ++i) ids[i] = static_cast<TokenId>(i);
      trie.insert({"m"}, ids, a.blocks());
      a.clear();
      const auto m = trie.match({"m"}, ids);
      REQUIRE(m.tokens == tokens / page * page);
      inferkit::BlockTable<QuantizedKv> c(pool);
      c.assign_prefix(m.blocks, m.tokens);
      append(c, x, m.tokens, tokens, 3);
      check_equal(c, dx, page);
      auto h = m.handle;
      trie.release(h);
      CHECK(trie.evict(1 << 20) == tokens / page);
      check_equal(c, dx, page);  // the table's reference keeps the pages alive
      b.clear();
      inferkit::BlockTable<QuantizedKv> reused(pool);  // freed blocks hold stale codes
      append(reused, x, 0, split, 11);
      append(reused, y, split, tokens, 2);
      check_equal(reused, dy, page);
    }
  }
}

TEST_CASE("per-channel keys: rejected tokens are dropped and their groups refilled, never re-quantized",
          "[kv][paged][quantized]") {
  const Index page = 8, group = 4, tokens = 30;
  const KvQuantConfig q{QuantSpec{4, false, group, QuantAxis::kPerChannel, 0},
                        QuantSpec{8, true, 32, QuantAxis::kPerToken, 0}};
  inferkit::BlockPool<QuantizedKv> pool(config(page, 16, q));
  const Seq x(tokens, 3), y(tokens, 4);
  // Into the group filling, the group quantized last, a group boundary, a page boundary, and as
  // far back as the float history reaches (kPagedKeyHistory = 16 tokens before the group filling).
  for (Index cut : {17, 14, 13, 12, 8, 5, 0}) {
    INFO("cut " << cut);
    inferkit::BlockTable<QuantizedKv> t(pool);
    append(t, x, 0, 18, 5);  // groups [0, 16) quantized, 16..17 in float
    t.truncate(cut);
    append(t, y, cut, tokens, 3);
    inferkit::QuantizedKvCache dense(kLayers, kHkv, kD, q);
    append(dense, x, 0, cut);
    append(dense, y, cut, tokens);
    check_equal(t, dense, page);
  }
  inferkit::BlockTable<QuantizedKv> t(pool);
  append(t, x, 0, tokens, 5);  // groups [0, 28) quantized, the history holds [12, 28)
  CHECK_THROWS_WITH(t.truncate(11),
                    Catch::Contains("n = 11") && Catch::Contains("layer 0") && Catch::Contains("from 12"));
  CHECK(t.num_tokens() == tokens);  // nothing changed
  t.truncate(13);
  CHECK_THROWS_WITH(t.truncate(7), Catch::Contains("n = 7"));
  // Per-channel keys are written in order, and not rewritten once their group is quantized.
  REQUIRE(t.reserve(3));
  t.commit(3);
  CHECK_THROWS_WITH(t.write_at(0, 14, x.keys(0, 0, 1), x.values(0, 0, 1)),
                    Catch::Contains("token = 14") && Catch::Contains("token order"));
  CHECK_THROWS_WITH(t.write_at(0, 10, x.keys(0, 0, 1), x.values(0, 0, 1)),
                    Catch::Contains("token = 10") && Catch::Contains("quantized already"));
}

TEST_CASE("quantized pool: exact bytes per page, tokens per GiB, spec errors name the parameter",
          "[kv][paged][quantized]") {
  const QuantSpec int8{8, true, 32, QuantAxis::kPerToken, 0}, int4{4, false, 32, QuantAxis::kPerToken, 0};
  // Per (layer, head, token): int8 d 64 = 64 code bytes + 2 groups x 4 parameter bytes, K and V.
  inferkit::BlockPool<QuantizedKv> p8(config(16, 10, {int8, int8}));
  CHECK(p8.block_bytes() == std::size_t(kLayers * kHkv * 16 * (64 + 8) * 2));
  const auto b1 = p8.allocate(), b2 = p8.allocate();
  REQUIRE((b1 && b2));
  CHECK(p8.bytes_in_use() == 2 * p8.block_bytes());
  // KIVI: keys 4-bit codes (32 bytes a token) + one (step, min) per channel per 16-token group.
  const KvQuantConfig kivi{QuantSpec{4, false, 16, QuantAxis::kPerChannel, 0}, int4};
  inferkit::BlockPool<QuantizedKv> pk(config(16, 10, kivi));
  CHECK(pk.block_bytes() == std::size_t(kLayers * kHkv * ((16 * 32 + 64 * 4) + (16 * 32 + 16 * 2 * 4))));
  inferkit::BlockTable<QuantizedKv> t(pk);
  CHECK(t.tail_bytes() == std::size_t(kLayers * kHkv * (16 + 16) * kD * 4));
  inferkit::BlockPool<float> pf({kLayers, kHkv, kD, 16, 10});
  CHECK(double(pf.block_bytes()) / double(p8.block_bytes()) == Approx(512.0 / 144.0));
  CHECK(p8.kv_encoding() == "q:k8sg32t,v8sg32t");
  CHECK(pk.kv_encoding() == "q:k4ag16c,v4ag32t");

  const auto bad = [&](KvQuantConfig q, Index page, Index d = kD) {
    inferkit::BlockPoolConfig c{1, 1, d, page, 4};
    c.quant = q;
    inferkit::BlockPool<QuantizedKv> p(c);
  };
  CHECK_THROWS_WITH(bad({QuantSpec{4, false, 32, QuantAxis::kPerChannel, 0}, int4}, 16),
                    Catch::Contains("page_size = 16") && Catch::Contains("keys.group_size"));
  CHECK_THROWS_WITH(bad({QuantSpec{4, false, 32, QuantAxis::kPerChannel, 32}, int4}, 32),
                    Catch::Contains("keys.residual = 32"));
  CHECK_THROWS_WITH(bad({int8, QuantSpec{8, true, 32, QuantAxis::kPerToken, 4}}, 16),
                    Catch::Contains("values.residual = 4"));
  CHECK_THROWS_WITH(bad({int8, QuantSpec{4, false, 16, QuantAxis::kPerChannel, 0}}, 16),
                    Catch::Contains("values.axis"));
  CHECK_THROWS_WITH(bad({int8, int8}, 16, 48), Catch::Contains("head_dim = 48"));
  CHECK_THROWS_WITH(bad({QuantSpec{3, true, 32, QuantAxis::kPerToken, 0}, int8}, 16), Catch::Contains("keys.bits = 3"));
}

TEST_CASE("the context identity includes the KV encoding: a float request never matches int8 pages",
          "[kv][trie][quantized]") {
  const QuantSpec int8{8, true, 32, QuantAxis::kPerToken, 0};
  inferkit::BlockPool<QuantizedKv> pool(config(4, 8, {int8, int8}));
  inferkit::PrefixTrie<QuantizedKv> trie(pool);
  std::vector<TokenId> ids{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<BlockId> blocks{*pool.allocate(), *pool.allocate()};
  CHECK(trie.insert({"m"}, ids, blocks) == 2);
  CHECK(trie.peek({"m"}, ids) == 8);
  inferkit::ContextIdentity as_float{"m"}, as_int8{"m"}, as_int4{"m"};
  as_float.kv_encoding = inferkit::BlockPool<float>({kLayers, kHkv, kD, 4, 1}).kv_encoding();
  as_int8.kv_encoding = pool.kv_encoding();
  as_int4.kv_encoding = "q:k4ag32t,v4ag32t";
  CHECK(trie.peek(as_int8, ids) == 8);   // explicit and implicit encodings are the same root
  CHECK(trie.peek(as_float, ids) == 0);  // float request, int8 pages
  CHECK(trie.match(as_float, ids).tokens == 0);
  CHECK(trie.peek(as_int4, ids) == 0);
  CHECK_THROWS_WITH(trie.insert(as_float, ids, blocks), Catch::Contains("identity.kv_encoding = f32"));
  for (BlockId b : blocks) pool.release(b);
}
