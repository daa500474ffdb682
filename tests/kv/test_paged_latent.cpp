// Paged latent rows (kv/paged_latent.hpp): mla_attention over PagedLatentSource against the
// materialized fp64 reference (tests/attention/mla_test_util.hpp) on the rows the pages hold,
// with fragmented pools, forks sharing prefix pages, both layers of a pool layer, float / bf16 /
// int8 pages; the rows equal a dense LatentCache's; bytes of the memory plan.
#include <catch2/catch.hpp>

#include <vector>

#include "attention/mla_test_util.hpp"
#include "inferkit/kv/latent_cache.hpp"
#include "inferkit/kv/memory_planner.hpp"
#include "inferkit/kv/paged_latent.hpp"

using inferkit::Index;
using test::MlaProblem;

namespace {

constexpr inferkit::MlaShape kShape{
    .num_heads = 4, .kv_lora_rank = 64, .qk_nope_dim = 16, .qk_rope_dim = 32, .v_head_dim = 16};

// Appends tokens [t0, t1) of P's latents to MLA layer `layer` of a table in pieces of `piece`.
template <class T>
void append_rows(inferkit::BlockPool<T>& pool, inferkit::BlockTable<T>& table, const MlaProblem& P, Index layer,
                 Index t0, Index t1) {
  const Index r = P.s.kv_lora_rank, e = P.s.qk_rope_dim;
  inferkit::write_latent(pool, table, layer, t0, {P.c.data() + t0 * r, t1 - t0, r},
                         {P.kpe.data() + t0 * e, t1 - t0, e});
}

template <class T>
void check_paged(Index page) {
  const Index layers = 3, tk = 230;
  inferkit::BlockPool<T> pool(inferkit::paged_latent_config(
      {.layers = layers, .kv_lora_rank = kShape.kv_lora_rank, .rope_dim = kShape.qk_rope_dim}, page, 600));
  REQUIRE(pool.config().layers == 2);
  REQUIRE(pool.config().head_dim == 96);
  // Two problems (sequences), their tokens interleaved in the pool so their pages are not consecutive.
  const MlaProblem A(kShape, 3, tk, 50), B(kShape, 1, tk, 60), C(kShape, 2, tk, 70);
  inferkit::BlockTable<T> a(pool), b(pool);
  for (Index t = 0; t < tk; t += 37) {
    const Index n = std::min<Index>(37, tk - t);
    for (auto* seq : {&a, &b}) {
      REQUIRE(seq->reserve(n));
      const MlaProblem& P = seq == &a ? A : B;
      const MlaProblem& Q = seq == &a ? C : A;  // another layer's rows: layers never mix
      append_rows(pool, *seq, P, 1, t, t + n);  // the value stream of pool layer 0
      append_rows(pool, *seq, Q, 0, t, t + n);  // its key stream
      append_rows(pool, *seq, P, 2, t, t + n);  // pool layer 1's keys
      seq->commit(n);
    }
  }
  const auto check = [&](const MlaProblem& P, const inferkit::BlockTable<T>& seq, Index layer) {
    INFO("layer " << layer << " page " << page);
    const inferkit::PagedLatentSource<T> src(seq, layer);
    REQUIRE(src.num_tokens() == P.tk);
    std::vector<float> out(static_cast<std::size_t>(P.tq * 4 * 16)), lse(static_cast<std::size_t>(P.tq * 4));
    inferkit::mla_attention(kShape, P.qview(), src, P.weights(), {out.data(), P.tq, 4, 16}, {lse.data(), P.tq, 4},
                            {.kv_split_tokens = 50});
    std::vector<double> ref, ref_lse;
    test::mla_reference(P, test::stored_rows(src, 96), kShape.default_scale(), true, {}, ref, ref_lse);
    const auto e = test::compare(out, lse, ref, ref_lse);
    CHECK(e.rel_rms < 2e-6);
    CHECK(e.lse_max < 2e-5);
    return test::stored_rows(src, 96);
  };
  const auto rows_a1 = check(A, a, 1);
  check(A, a, 2);
  check(C, a, 0);
  check(B, b, 1);
  // The pages hold what a dense LatentCache of the same storage holds, row for row.
  using Dense = std::conditional_t<inferkit::kQuantizedPool<T>, inferkit::LatentInt8, T>;
  inferkit::LatentCache<Dense> dense({.layers = 1, .kv_lora_rank = 64, .rope_dim = 32});
  dense.append(0, {A.c.data(), tk, 64}, {A.kpe.data(), tk, 32});
  CHECK(test::stored_rows(dense.source(0), 96) == rows_a1);

  // A fork shares every page; its own appends copy the shared last page first (reserve).
  inferkit::BlockTable<T> fork = a;
  const Index extra = 5;
  REQUIRE(fork.reserve(extra));
  const MlaProblem F(kShape, 2, tk + extra, 80);
  for (Index layer : {0, 1, 2}) append_rows(pool, fork, F, layer, tk, tk + extra);
  fork.commit(extra);
  CHECK(test::stored_rows(inferkit::PagedLatentSource<T>(a, 1), 96) == rows_a1);  // the original is untouched
  const auto fork_rows = test::stored_rows(inferkit::PagedLatentSource<T>(fork, 1), 96);
  CHECK(std::vector<float>(fork_rows.begin(), fork_rows.begin() + tk * 96) == rows_a1);
  // Rewriting a shared page is refused.
  CHECK_THROWS_WITH(append_rows(pool, fork, F, 1, 0, 1), Catch::Contains("share"));
}

}  // namespace

TEST_CASE("paged latent rows: mla_attention matches the fp64 reference over float, bf16 and int8 pages",
          "[kv][mla][paged]") {
  for (Index page : {1, 16, 64}) {
    check_paged<float>(page);
    check_paged<inferkit::BFloat16>(page);
    check_paged<inferkit::QuantizedKv>(page);
  }
}

TEST_CASE("paged latent rows: bad arguments are named; the plan counts whole pages", "[kv][mla][paged][errors]") {
  inferkit::BlockPool<float> pool(inferkit::paged_latent_config({.layers = 2, .kv_lora_rank = 8, .rope_dim = 8}, 4, 8));
  inferkit::BlockTable<float> t(pool);
  REQUIRE(t.reserve(4));
  std::vector<float> c(8 * 8), k(8 * 8);
  CHECK_THROWS_WITH(inferkit::write_latent(pool, t, 2, 0, {c.data(), 1, 8}, {k.data(), 1, 8}),
                    Catch::Contains("layer"));
  CHECK_THROWS_WITH(inferkit::write_latent(pool, t, 0, 2, {c.data(), 3, 8}, {k.data(), 3, 8}),
                    Catch::Contains("first"));
  CHECK_THROWS_WITH(inferkit::write_latent(pool, t, 0, 0, {c.data(), 1, 8}, {k.data(), 1, 4}),
                    Catch::Contains("k_pe.cols()"));
  CHECK_THROWS_WITH(inferkit::paged_latent_config({.layers = 2, .kv_lora_rank = 8}, 0, 8),
                    Catch::Contains("page_size"));
  inferkit::BlockPool<float> wide({.layers = 1, .kv_heads = 2, .head_dim = 16, .page_size = 4, .max_blocks = 4});
  inferkit::BlockTable<float> w(wide);
  REQUIRE(w.reserve(1));
  CHECK_THROWS_WITH(inferkit::write_latent(wide, w, 0, 0, {c.data(), 1, 8}, {k.data(), 1, 8}),
                    Catch::Contains("kv_heads"));
  // 27 layers (14 pool layers, 28 streams), 100 tokens in pages of 16 (112 tokens), bf16 rows.
  const inferkit::LatentCachePlan plan{
      .layers = 27, .kv_lora_rank = 512, .rope_dim = 64, .format = inferkit::LatentFormat::kBF16, .page_size = 16};
  CHECK(inferkit::latent_cache_bytes(plan, 100, 1) == 28.0 * 1152 * 112);
  inferkit::BlockPool<inferkit::BFloat16> real(
      inferkit::paged_latent_config({.layers = 27, .kv_lora_rank = 512, .rope_dim = 64}, 16, 7));
  inferkit::BlockTable<inferkit::BFloat16> seq(real);
  REQUIRE(seq.reserve(100));
  CHECK(static_cast<double>(real.bytes_in_use()) == inferkit::latent_cache_bytes(plan, 100, 1));
}
