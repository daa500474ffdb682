// mla_attention (attention/mla.hpp) over latent caches (kv/latent_cache.hpp) against a
// materialized fp64 reference written here: per head K_h = [W_UK_h c; k_pe], V_h = W_UV_h c,
// then plain softmax attention (causal, bottom-right aligned, optional sink logit) in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/mla_test_util.hpp"
#include "inferkit/attention/mla.hpp"
#include "inferkit/kv/latent_cache.hpp"
#include "inferkit/kv/memory_planner.hpp"

using inferkit::Index;
using inferkit::MlaShape;

using namespace test;

namespace {

// Runs mla_attention over a LatentCache<T> filled with P's rows; returns the kernel errors
// against the reference on the stored rows and on the unrounded rows.
template <class T>
std::pair<Errors, Errors> run_mla(const MlaProblem& P, inferkit::AttentionOptions opt,
                                  const std::vector<float>& sinks = {}) {
  const MlaShape& s = P.s;
  inferkit::LatentCache<T> cache({.layers = 2, .kv_lora_rank = s.kv_lora_rank, .rope_dim = s.qk_rope_dim});
  // Appended in two pieces, into layer 1 (layer 0 stays empty).
  const Index half = P.tk / 2;
  cache.append(1, {P.c.data(), half, s.kv_lora_rank}, {P.kpe.data(), half, s.qk_rope_dim});
  cache.append(1, {P.c.data() + half * s.kv_lora_rank, P.tk - half, s.kv_lora_rank},
               {P.kpe.data() + half * s.qk_rope_dim, P.tk - half, s.qk_rope_dim});
  REQUIRE(cache.length(1) == P.tk);
  REQUIRE(cache.length(0) == 0);
  const auto src = cache.source(1);
  std::vector<float> out(static_cast<std::size_t>(P.tq * s.num_heads * s.v_head_dim), -7.0f),
      lse(static_cast<std::size_t>(P.tq * s.num_heads));
  if (!sinks.empty()) opt.sink_logits = sinks;
  inferkit::mla_attention(s, P.qview(), src, P.weights(), {out.data(), P.tq, s.num_heads, s.v_head_dim},
                          {lse.data(), P.tq, s.num_heads}, opt);
  const double scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(s.query_dim()));
  std::vector<double> ref, ref_lse;
  mla_reference(P, stored_rows(src, s.latent_dim()), scale, opt.causal, sinks, ref, ref_lse);
  const Errors stored = compare(out, lse, ref, ref_lse);
  std::vector<float> exact(static_cast<std::size_t>(P.tk * s.latent_dim()));
  for (Index j = 0; j < P.tk; ++j) {
    std::copy_n(P.c.data() + j * s.kv_lora_rank, s.kv_lora_rank, exact.data() + j * s.latent_dim());
    std::copy_n(P.kpe.data() + j * s.qk_rope_dim, s.qk_rope_dim, exact.data() + j * s.latent_dim() + s.kv_lora_rank);
  }
  mla_reference(P, exact, scale, opt.causal, sinks, ref, ref_lse);
  return {stored, compare(out, lse, ref, ref_lse)};
}

constexpr MlaShape kV2Lite{
    .num_heads = 16, .kv_lora_rank = 512, .qk_nope_dim = 128, .qk_rope_dim = 64, .v_head_dim = 128};
constexpr MlaShape kV3{.num_heads = 128, .kv_lora_rank = 512, .qk_nope_dim = 128, .qk_rope_dim = 64, .v_head_dim = 128};

}  // namespace

TEST_CASE("mla: random shapes match the materialized fp64 reference (f32, bf16, int8 latents)", "[attention][mla]") {
  std::mt19937 rng(2024);
  const Index ranks[] = {16, 48, 64, 96}, ropes[] = {0, 16, 32}, nopes[] = {8, 24}, vdims[] = {8, 20, 32};
  for (int trial = 0; trial < 24; ++trial) {
    MlaShape s{.num_heads = 1 + static_cast<Index>(rng() % 9),
               .kv_lora_rank = ranks[rng() % 4],
               .qk_nope_dim = nopes[rng() % 2],
               .qk_rope_dim = ropes[rng() % 3],
               .v_head_dim = vdims[rng() % 3]};
    const Index tq = trial % 3 == 0 ? 9 + static_cast<Index>(rng() % 40) : 1 + static_cast<Index>(rng() % 8);
    const Index tk = tq + static_cast<Index>(rng() % 500);
    MlaProblem P(s, tq, tk, 100 + trial);
    inferkit::AttentionOptions opt;
    opt.causal = rng() % 4 != 0;
    opt.kv_split_tokens = rng() % 2 ? 1 + static_cast<Index>(rng() % 200) : 0;
    if (rng() % 3 == 0) opt.scale = 0.07f;
    INFO("trial " << trial << " H=" << s.num_heads << " rank=" << s.kv_lora_rank << " rope=" << s.qk_rope_dim
                  << " nope=" << s.qk_nope_dim << " v=" << s.v_head_dim << " Tq=" << tq << " Tk=" << tk);
    const auto f32 = run_mla<float>(P, opt);
    CHECK(f32.first.rel_rms < 2e-6);
    CHECK(f32.first.lse_max < 2e-5);
    CHECK(f32.second.rel_rms < 2e-6);
    const auto bf = run_mla<inferkit::BFloat16>(P, opt);
    CHECK(bf.first.rel_rms < 2e-6);  // exact arithmetic over the stored bf16 rows
    CHECK(bf.first.lse_max < 2e-5);
    CHECK(bf.second.rel_rms < 2e-2);  // stated bound against the unrounded latents
    if (s.latent_dim() % inferkit::kLatentInt8Group == 0) {
      const auto i8 = run_mla<inferkit::LatentInt8>(P, opt);
      CHECK(i8.first.rel_rms < 2e-6);
      CHECK(i8.first.lse_max < 2e-5);
      CHECK(i8.second.rel_rms < 4e-2);
    }
  }
}

TEST_CASE("mla: DeepSeek-V2-Lite and V3 geometries, decode and prefill", "[attention][mla]") {
  for (const MlaShape& s : {kV2Lite, kV3}) {
    for (Index tq : {Index{1}, Index{12}}) {
      const Index tk = s.num_heads == 16 ? 300 : 70;  // the fp64 reference materializes H x Tk x 256 x 512
      INFO("H=" << s.num_heads << " Tq=" << tq << " Tk=" << tk);
      MlaProblem P(s, tq, tk, static_cast<std::uint32_t>(7 * tq + s.num_heads));
      inferkit::AttentionOptions opt{.kv_split_tokens = 64};
      const auto f32 = run_mla<float>(P, opt);
      CHECK(f32.first.rel_rms < 2e-6);
      CHECK(f32.first.lse_max < 2e-5);
      const auto bf = run_mla<inferkit::BFloat16>(P, opt);
      CHECK(bf.first.rel_rms < 2e-6);
      CHECK(bf.second.rel_rms < 2e-2);
      const auto i8 = run_mla<inferkit::LatentInt8>(P, opt);
      CHECK(i8.first.rel_rms < 2e-6);
      CHECK(i8.second.rel_rms < 4e-2);
    }
  }
}

TEST_CASE("mla: sink logits, split-KV and thread counts", "[attention][mla][sink]") {
  MlaProblem P(kV2Lite, 2, 600, 77);
  std::vector<float> sinks = test::random_normal(16, 78, 2.0f);
  const auto with_sink = run_mla<float>(P, {}, sinks);
  CHECK(with_sink.first.rel_rms < 2e-6);
  CHECK(with_sink.first.lse_max < 2e-5);

  inferkit::LatentCache<inferkit::BFloat16> cache({.layers = 1, .kv_lora_rank = 512, .rope_dim = 64});
  cache.append(0, {P.c.data(), P.tk, 512}, {P.kpe.data(), P.tk, 64});
  const auto run = [&](inferkit::AttentionOptions opt) {
    test::Result r{std::vector<float>(2 * 16 * 128), std::vector<float>(2 * 16)};
    inferkit::mla_attention(kV2Lite, P.qview(), cache.source(0), P.weights(), {r.out.data(), 2, 16, 128},
                            {r.lse.data(), 2, 16}, opt);
    return r;
  };
  const auto one_pass = run({.kv_split_tokens = 100000});
  for (Index split : {1, 100, 599}) {
    INFO("split " << split);
    const auto parts = run({.kv_split_tokens = split});
    CHECK(test::max_abs_diff(one_pass.out, parts.out) < 2e-6);
    CHECK(test::max_abs_diff(one_pass.lse, parts.lse) < 2e-5);
  }
  const auto t1 = run({.num_threads = 1}), t2 = run({.num_threads = 2});
  CHECK(t1.out == t2.out);
  CHECK(t1.lse == t2.lse);
}

TEST_CASE("latent cache: rows, int8 rounding bound, bytes, truncate and the memory plan", "[kv][mla]") {
  const Index rank = 64, rope = 32, n = 50;
  const auto c = test::random_normal(n * rank, 5), k = test::random_normal(n * rope, 6);
  inferkit::LatentCache<inferkit::LatentInt8> i8({.layers = 1, .kv_lora_rank = rank, .rope_dim = rope});
  i8.append(0, {c.data(), n, rank}, {k.data(), n, rope});
  const auto rows = stored_rows(i8.source(0), rank + rope);
  for (Index t = 0; t < n; ++t)
    for (Index g = 0; g < (rank + rope) / 32; ++g) {
      // Symmetric 8-bit codes: |x - x^| <= step / 2 with step = max|x| / 127 (binary16, rounded up: 1.001x).
      double amax = 0;
      const auto x = [&](Index i) { return i < rank ? c[t * rank + i] : k[t * rope + i - rank]; };
      for (Index i = g * 32; i < g * 32 + 32; ++i) amax = std::max(amax, double(std::abs(x(i))));
      for (Index i = g * 32; i < g * 32 + 32; ++i)
        CHECK(std::abs(rows[t * (rank + rope) + i] - x(i)) <= amax / 127 / 2 * 1.002 + 1e-7);
    }
  CHECK(i8.row_bytes() == 96 + 3 * 4);
  CHECK(i8.bytes() == static_cast<std::size_t>(n * (96 + 12)));
  i8.truncate(0, 20);
  CHECK(i8.length(0) == 20);
  CHECK(i8.source(0).num_tokens() == 20);
  CHECK(stored_rows(i8.source(0), rank + rope) == std::vector<float>(rows.begin(), rows.begin() + 20 * 96));

  inferkit::LatentCache<float> f({.layers = 1, .kv_lora_rank = rank, .rope_dim = rope});
  f.append(0, {c.data(), n, rank}, {k.data(), n, rope});
  const auto frows = stored_rows(f.source(0), rank + rope);
  for (Index t = 0; t < n; ++t) {
    CHECK(frows[t * 96 + 5] == c[t * rank + 5]);
    CHECK(frows[t * 96 + rank + 7] == k[t * rope + 7]);
  }
  // DeepSeek-V2-Lite, 27 layers, bf16: 576 * 2 bytes a token and layer against 16 x 320 x 2 materialized.
  const inferkit::LatentCachePlan plan{.layers = 27,
                                       .kv_lora_rank = 512,
                                       .rope_dim = 64,
                                       .num_heads = 16,
                                       .qk_nope_dim = 128,
                                       .v_head_dim = 128,
                                       .format = inferkit::LatentFormat::kBF16};
  CHECK(inferkit::latent_cache_bytes(plan, 8192, 2) == 27.0 * 1152 * 8192 * 2);
  CHECK(inferkit::materialized_mla_kv_bytes(plan, 8192, 2, 2.0) == 27.0 * 16 * 320 * 2 * 8192 * 2);
  CHECK(inferkit::materialized_mla_kv_bytes(plan, 1, 1, 2.0) / inferkit::latent_cache_bytes(plan, 1, 1) > 7.0);
}

TEST_CASE("mla and the latent cache reject bad arguments by name", "[attention][mla][errors]") {
  const MlaShape s{.num_heads = 2, .kv_lora_rank = 16, .qk_nope_dim = 8, .qk_rope_dim = 16, .v_head_dim = 8};
  MlaProblem P(s, 1, 10, 3);
  inferkit::LatentCache<float> cache({.layers = 1, .kv_lora_rank = 16, .rope_dim = 16});
  cache.append(0, {P.c.data(), 10, 16}, {P.kpe.data(), 10, 16});
  std::vector<float> out(2 * 8);
  const inferkit::Tensor3View<float> ov(out.data(), 1, 2, 8);
  CHECK_THROWS_WITH(
      inferkit::mla_attention(MlaShape{s.num_heads, 16, 8, 8, 8}, P.qview(), cache.source(0), P.weights(), ov),
      Catch::Contains("latent.head_dim()") && Catch::Contains("24"));
  auto w = P.weights();
  w.w_uv = {P.wuv.data(), 2, 4, 16};
  CHECK_THROWS_WITH(inferkit::mla_attention(s, P.qview(), cache.source(0), w, ov),
                    Catch::Contains("weights.w_uv.dim1()"));
  std::vector<float> kv(10 * 2 * 32);
  const inferkit::DenseKv<float> two_heads({kv.data(), 10, 2, 32}, {kv.data(), 10, 2, 32});
  CHECK_THROWS_WITH(inferkit::mla_attention(s, P.qview(), two_heads, P.weights(), ov),
                    Catch::Contains("latent.num_kv_heads()"));
  CHECK_THROWS_WITH(inferkit::mla_attention(s, P.qview(), cache.source(0), P.weights(), {out.data(), 1, 2, 4}),
                    Catch::Contains("out.dim2()"));
  CHECK_THROWS_WITH(cache.append(1, {P.c.data(), 1, 16}, {P.kpe.data(), 1, 16}), Catch::Contains("layer"));
  CHECK_THROWS_WITH(cache.append(0, {P.c.data(), 1, 8}, {P.kpe.data(), 1, 16}), Catch::Contains("c.cols()"));
  CHECK_THROWS_WITH(cache.truncate(0, 11), Catch::Contains("tokens"));
  CHECK_THROWS_WITH(inferkit::LatentCache<inferkit::LatentInt8>({.layers = 1, .kv_lora_rank = 20, .rope_dim = 4}),
                    Catch::Contains("config.kv_lora_rank + config.rope_dim"));
  CHECK_THROWS_WITH(inferkit::LatentCache<float>({.layers = 0, .kv_lora_rank = 20}), Catch::Contains("config.layers"));
}
