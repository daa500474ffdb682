// Context-parallel attention (distributed/context_parallel.hpp) under mpirun -np 2 and -np 3:
// each rank holds a token range of the same random sequence; the merged result is compared with
// the fp64 reference and with single-process attention() over all tokens, both computed on every
// rank from the full K/V.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "distributed/mpi_test_util.hpp"
#include "inferkit/attention/shifted_kv.hpp"
#include "inferkit/distributed/context_parallel.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"
#include "inferkit/kv/quantized_cache.hpp"

using inferkit::KvShard;
using test::Case;

namespace {

enum class Store { kF32, kBF16, kInt8, kPaged };

const char* name(Store s) {
  switch (s) {
    case Store::kF32:
      return "f32";
    case Store::kBF16:
      return "bf16";
    case Store::kInt8:
      return "int8";
    case Store::kPaged:
      return "paged";
  }
  return "?";
}

/// Uneven shards of tk tokens over n ranks (fixed cut fractions); with `empty_rank` >= 0 that
/// rank holds no tokens and the next rank (the previous one for the last rank) takes its range.
std::vector<KvShard> uneven_shards(Index tk, int n, int empty_rank = -1) {
  static const double cuts[] = {0.0, 0.37, 0.61, 0.8, 0.9};
  std::vector<Index> at;
  for (int r = 0; r < n; ++r) at.push_back(static_cast<Index>(cuts[r] * static_cast<double>(tk)));
  at.push_back(tk);
  if (empty_rank >= 0 && empty_rank + 1 < n)
    at[static_cast<std::size_t>(empty_rank) + 1] = at[static_cast<std::size_t>(empty_rank)];
  else if (empty_rank >= 0)
    at[static_cast<std::size_t>(empty_rank)] = tk;
  std::vector<KvShard> s;
  for (int r = 0; r < n; ++r)
    s.push_back(
        {at[static_cast<std::size_t>(r)], at[static_cast<std::size_t>(r) + 1] - at[static_cast<std::size_t>(r)]});
  return s;
}

struct Data {
  std::vector<float> q, k, v;
  explicit Data(const Case& c)
      : q(test::random_normal(static_cast<std::size_t>(c.tq * c.hq * c.d), c.seed)),
        k(test::random_normal(static_cast<std::size_t>(c.tk * c.hkv * c.d), c.seed + 1)),
        v(test::random_normal(static_cast<std::size_t>(c.tk * c.hkv * c.d), c.seed + 2)) {}
  inferkit::Tensor3View<const float> keys(const Case& c, Index first, Index n) const {
    return {k.data() + first * c.hkv * c.d, n, c.hkv, c.d};
  }
  inferkit::Tensor3View<const float> values(const Case& c, Index first, Index n) const {
    return {v.data() + first * c.hkv * c.d, n, c.hkv, c.d};
  }
};

/// Calls f(source) with tokens [first, first + n) of the data held in the chosen store, at
/// their global positions.
template <class F>
void with_source(Store store, const Case& c, const Data& data, Index first, Index n, F&& f) {
  const auto k = data.keys(c, first, n), v = data.values(c, first, n);
  const auto pos = static_cast<std::int32_t>(first);
  switch (store) {
    case Store::kF32:
      return f(inferkit::DenseKv<float>(k, v, pos));
    case Store::kBF16: {
      std::vector<float> kf(k.data(), k.data() + n * c.hkv * c.d), vf(v.data(), v.data() + n * c.hkv * c.d);
      const auto kb = test::to_storage<inferkit::BFloat16>(kf), vb = test::to_storage<inferkit::BFloat16>(vf);
      return f(inferkit::DenseKv<inferkit::BFloat16>({kb.data(), n, c.hkv, c.d}, {vb.data(), n, c.hkv, c.d}, pos));
    }
    case Store::kInt8: {
      inferkit::QuantizedKvCache cache(1, c.hkv, c.d, inferkit::kv_quant_preset("int8", c.d));
      if (n > 0) cache.append(0, k, v);
      return f(inferkit::ShiftedKv(cache.source(0), pos));
    }
    case Store::kPaged: {
      inferkit::BlockPool<float> pool({1, c.hkv, c.d, 16, n / 16 + 2});
      inferkit::BlockTable<float> table(pool);
      if (n > 0) {
        REQUIRE(table.reserve(n));
        table.write(0, k, v);
        table.commit(n);
      }
      return f(inferkit::ShiftedKv(table.source(0), pos));
    }
  }
}

struct Outcome {
  test::Result cp, single, reference;
  bool same_on_every_rank = false;
};

/// Runs the context-parallel call with this rank's shard, and the single-process baselines (the
/// fp64 reference only when `reference`).
Outcome run(const Case& c, Store store, const std::vector<KvShard>& shards, bool reference = true) {
  const Data data(c);
  const auto mine = shards[static_cast<std::size_t>(test::world_rank())];
  const inferkit::Tensor3View<const float> q(data.q.data(), c.tq, c.hq, c.d);
  Outcome o;
  const auto fresh = [&] {
    return test::Result{std::vector<float>(data.q.size(), -7.0f),
                        std::vector<float>(static_cast<std::size_t>(c.tq * c.hq), -7.0f)};
  };
  o.cp = o.single = o.reference = fresh();
  const auto views = [&](test::Result& r) {
    return std::pair{inferkit::Tensor3View<float>(r.out.data(), c.tq, c.hq, c.d),
                     inferkit::MatrixView<float>(r.lse.data(), c.tq, c.hq)};
  };
  with_source(store, c, data, mine.first, mine.tokens, [&](const auto& src) {
    auto [ov, lv] = views(o.cp);
    inferkit::context_parallel_attention(MPI_COMM_WORLD, q, src, ov, lv, c.opt);
  });
  with_source(store, c, data, 0, c.tk, [&](const auto& src) {
    auto [ov, lv] = views(o.single);
    inferkit::attention(q, src, ov, lv, c.opt);
    if (!reference) return;
    auto [orf, lrf] = views(o.reference);
    inferkit::attention_reference(q, src, orf, lrf, c.opt);
  });
  std::vector<float> both = o.cp.out;
  both.insert(both.end(), o.cp.lse.begin(), o.cp.lse.end());
  o.same_on_every_rank = test::same_bits_on_every_rank(both);
  return o;
}

void check_close(const Case& c, Store store, const std::vector<KvShard>& shards) {
  const Outcome o = run(c, store, shards);
  std::string layout;
  for (const auto& s : shards) layout += "[" + std::to_string(s.first) + "+" + std::to_string(s.tokens) + "]";
  INFO(c.describe() << " store=" << name(store) << " shards=" << layout);
  CHECK(o.same_on_every_rank);
  CHECK(test::max_abs_diff(o.cp.out, o.reference.out) <= 2e-5);
  CHECK(test::max_abs_diff(o.cp.lse, o.reference.lse) <= 8e-5);
  CHECK(test::max_abs_diff(o.cp.out, o.single.out) <= 4e-6);
  CHECK(test::max_abs_diff(o.cp.lse, o.single.lse) <= 1e-5);
}

}  // namespace

TEST_CASE("context-parallel decode over uneven shards matches single-process attention", "[distributed][context]") {
  const int n = test::world_size();
  const int heads[][2] = {{4, 4}, {8, 2}, {6, 1}};
  for (int trial = 0; trial < 12; ++trial) {
    Case c{.tq = 1 + trial % 8,
           .tk = 300 + 97 * trial,
           .hq = heads[trial % 3][0],
           .hkv = heads[trial % 3][1],
           .d = trial % 2 ? 64 : 24};
    c.opt.causal = trial % 4 != 3;
    c.opt.window = trial % 3 == 1 ? 150 : 0;
    c.opt.alibi = trial % 5 == 2;
    c.opt.softcap = trial % 4 == 1 ? 5.0f : 0.0f;
    c.seed = static_cast<std::uint32_t>(100 + trial);
    check_close(c, Store::kF32, uneven_shards(c.tk, n));
  }
}

TEST_CASE("context-parallel attention with an empty shard", "[distributed][context]") {
  const int n = test::world_size();
  for (int empty = 0; empty < n; ++empty) {
    Case c{.tq = 2, .tk = 517, .hq = 8, .hkv = 2, .d = 32};
    c.seed = static_cast<std::uint32_t>(7 + empty);
    check_close(c, Store::kF32, uneven_shards(c.tk, n, empty));
    Case p = c;  // a prefill chunk too
    p.tq = 40;
    check_close(p, Store::kF32, uneven_shards(p.tk, n, empty));
  }
  // Every shard empty: zeros and LSE -inf, as attention() over no keys.
  Case c{.tq = 1, .tk = 0, .hq = 2, .hkv = 1, .d = 8};
  const Outcome o = run(c, Store::kF32, std::vector<KvShard>(static_cast<std::size_t>(n)));
  CHECK(o.cp.out == o.single.out);
  CHECK(o.cp.lse == o.single.lse);
  CHECK(o.cp.lse[0] == inferkit::kNegInf);
}

TEST_CASE("context-parallel prefill chunks use causal masks by global position", "[distributed][context]") {
  const int n = test::world_size();
  // A chunk of queries at the end of the sequence (its K/V already appended), bottom-right aligned.
  for (Index tq : {9, 64, 130}) {
    Case c{.tq = tq, .tk = 700, .hq = 4, .hkv = 2, .d = 32};
    c.opt.window = tq == 64 ? 200 : 0;
    c.opt.alibi = tq == 130;
    c.seed = static_cast<std::uint32_t>(tq);
    check_close(c, Store::kF32, uneven_shards(c.tk, n));
  }
  // Explicit global query positions inside the sequence: later shards are fully masked for some rows.
  Case c{.tq = 20, .tk = 600, .hq = 4, .hkv = 4, .d = 16};
  std::vector<std::int32_t> pos;
  for (int i = 0; i < 20; ++i) pos.push_back(100 + 23 * i);
  c.opt.query_positions = pos;
  check_close(c, Store::kF32, uneven_shards(c.tk, n));
}

TEST_CASE("context-parallel attention over bf16, int8-quantized and paged shards", "[distributed][context]") {
  const int n = test::world_size();
  for (Store s : {Store::kBF16, Store::kInt8, Store::kPaged}) {
    for (Index tq : {1, 5, 33}) {
      Case c{.tq = tq, .tk = 800, .hq = 8, .hkv = 2, .d = 64};
      c.seed = static_cast<std::uint32_t>(tq + 50);
      check_close(c, s, uneven_shards(c.tk, n));
    }
  }
}

TEST_CASE("context-parallel decode is bitwise equal to split-KV decode when shards are splits",
          "[distributed][context]") {
  const int n = test::world_size();
  // Explicit split size S: rank r holds [r S, (r + 1) S), the last shards shorter or empty.
  for (Index split : {128, 512}) {
    for (Index tq : {1, 3, 8}) {
      for (Index tk : {split * (n - 1) + 1, split * n - 17, split * (n - 1)}) {
        Case c{.tq = tq, .tk = tk, .hq = 8, .hkv = 2, .d = 64};
        c.opt.kv_split_tokens = split;
        c.opt.alibi = tq == 3;
        c.opt.window = tq == 8 ? split + 40 : 0;
        c.seed = static_cast<std::uint32_t>(split + tq + tk);
        for (Store s : {Store::kF32, Store::kInt8}) {
          const auto shards = inferkit::contiguous_shards(tk, n, split);
          const Outcome o = run(c, s, shards, false);  // the fp64 reference is checked above
          INFO(c.describe() << " store=" << name(s));
          CHECK(o.same_on_every_rank);
          CHECK(o.cp.out == o.single.out);
          CHECK(o.cp.lse == o.single.lse);
        }
      }
    }
  }
  // The automatic split (kv_split_tokens = 0): 512 tokens for these shapes, so shards of 512
  // tokens are its splits and every rank's own call takes one split.
  {
    Case c{.tq = 1, .tk = 512 * n - 100, .hq = 8, .hkv = 2, .d = 128};
    REQUIRE(inferkit::detail::decode_split_tokens(c.tk, c.hkv, 0) == 512);
    const Outcome o = run(c, Store::kF32, inferkit::contiguous_shards(c.tk, n, 512), false);
    CHECK(o.cp.out == o.single.out);
    CHECK(o.cp.lse == o.single.lse);
  }
}

TEST_CASE("context-parallel argument errors throw on every rank", "[distributed][context][errors]") {
  const int rank = test::world_rank(), n = test::world_size();
  const Case c{.tq = 2, .tk = 64, .hq = 4, .hkv = 2, .d = 8};
  const Data data(c);
  const auto shard = inferkit::contiguous_shards(c.tk, n)[static_cast<std::size_t>(rank)];
  const inferkit::DenseKv<float> kv(data.keys(c, shard.first, shard.tokens), data.values(c, shard.first, shard.tokens),
                                    static_cast<std::int32_t>(shard.first));
  std::vector<float> out(data.q.size()), lse(8);
  const inferkit::Tensor3View<const float> q(data.q.data(), c.tq, c.hq, c.d);
  // Query shapes that differ across ranks.
  const Index tq = rank == n - 1 ? 1 : 2;
  CHECK_THROWS_WITH(inferkit::context_parallel_attention(MPI_COMM_WORLD, q.slice0(0, tq), kv,
                                                         inferkit::Tensor3View<float>(out.data(), tq, c.hq, c.d)),
                    Catch::Contains("q.dim0() = 2 is invalid: differs across ranks"));
  // One rank's bad output shape: it throws attention()'s error, the others name it.
  const Index heads = rank == 1 ? 3 : 4;
  const auto bad = [&] {
    inferkit::context_parallel_attention(MPI_COMM_WORLD, q, kv, inferkit::Tensor3View<float>(out.data(), 2, heads, 8),
                                         inferkit::MatrixView<float>(lse.data(), 2, 4));
  };
  if (rank == 1)
    CHECK_THROWS_WITH(bad(), Catch::Contains("out") && Catch::Contains("3"));
  else
    CHECK_THROWS_WITH(bad(), Catch::Contains("rank = 1 is invalid") && Catch::Contains("context_parallel_attention"));
  // Nothing was left pending: a valid call still works.
  CHECK_NOTHROW(
      inferkit::context_parallel_attention(MPI_COMM_WORLD, q, kv, inferkit::Tensor3View<float>(out.data(), 2, 4, 8)));
}

TEST_CASE("broadcast_queries sends root's rows to every rank", "[distributed][context]") {
  const int rank = test::world_rank(), n = test::world_size();
  for (int root = 0; root < n; ++root) {
    // A strided view: heads 0..2 of a [3, 4, 5] buffer, so the rows are packed and unpacked.
    const auto want = test::random_normal(60, 9);
    std::vector<float> buf = rank == root ? want : std::vector<float>(60, 0.0f);
    inferkit::Tensor3View<float> q(buf.data(), 3, 3, 5, 20, 5);
    inferkit::broadcast_queries(MPI_COMM_WORLD, q, root);
    for (Index t = 0; t < 3; ++t)
      for (Index h = 0; h < 4; ++h)
        for (Index k = 0; k < 5; ++k)
          CHECK(buf[static_cast<std::size_t>(t * 20 + h * 5 + k)] ==
                (h < 3 ? want[static_cast<std::size_t>(t * 20 + h * 5 + k)]
                       : (rank == root ? want[static_cast<std::size_t>(t * 20 + h * 5 + k)] : 0.0f)));
  }
  std::vector<float> buf(8);
  CHECK_THROWS_WITH(inferkit::broadcast_queries(MPI_COMM_WORLD, inferkit::Tensor3View<float>(buf.data(), 1, 1, 8), n),
                    Catch::Contains("root = " + std::to_string(n) + " is invalid"));
}

TEST_CASE("contiguous_shards covers the tokens in rank order", "[distributed][context]") {
  const auto s = inferkit::contiguous_shards(1000, 3, 128);  // ceil(1000 / 3) = 334 -> 384
  REQUIRE(s.size() == 3);
  CHECK(s[0].first == 0);
  CHECK(s[0].tokens == 384);
  CHECK(s[1].first == 384);
  CHECK(s[1].tokens == 384);
  CHECK(s[2].first == 768);
  CHECK(s[2].tokens == 232);
  const auto e = inferkit::contiguous_shards(10, 4, 8);  // 8, 2, then two empty ranks
  CHECK(e[1].tokens == 2);
  CHECK(e[2].first == 10);
  CHECK(e[2].tokens == 0);
  CHECK(e[3].tokens == 0);
  CHECK_THROWS_WITH(inferkit::contiguous_shards(10, 0), Catch::Contains("ranks = 0 is invalid"));
  CHECK_THROWS_WITH(inferkit::contiguous_shards(-1, 2), Catch::Contains("num_tokens = -1 is invalid"));
  CHECK_THROWS_WITH(inferkit::contiguous_shards(10, 2, 0), Catch::Contains("align = 0 is invalid"));
}
