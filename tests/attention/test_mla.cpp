// mla_attention (attention/mla.hpp) over latent caches (kv/latent_cache.hpp) against a
// materialized fp64 reference written here: per head K_h = [W_UK_h c; k_pe], V_h = W_UV_h c,
// then plain softmax attention (causal, bottom-right aligned, optional sink logit) in double.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/mla_test_util.hpp"
#include "inferkit/attention/mla.hpp"
#include "inferkit/kv/latent_cache.hpp"

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

namespace {

// Batch-invariant MLA: the prompt's rows [0, tq) attended in one call over the whole cache, and
// again chunk by chunk as chunked prefill grows the cache (each chunk's rows appended, then its
// queries attended, causal), with 1 and 2 threads: every output and LSE bit must agree.
template <class T>
void check_batch_invariant_mla(const MlaShape& s, Index tq, Index tk, std::uint32_t seed) {
  const MlaProblem P(s, tq, tk, seed);
  const Index H = s.num_heads, dv = s.v_head_dim, qd = s.query_dim(), R = s.kv_lora_rank, rope = s.qk_rope_dim;
  const std::vector<float> sinks = test::random_normal(static_cast<std::size_t>(H), seed + 9, 2.0f);
  inferkit::AttentionOptions opt{.causal = true, .batch_invariant = true};
  opt.sink_logits = sinks;
  const auto append = [&](inferkit::LatentCache<T>& cache, Index a, Index b) {
    cache.append(0, {P.c.data() + a * R, b - a, R}, {P.kpe.data() + a * rope, b - a, rope});
  };
  inferkit::LatentCache<T> whole({.layers = 1, .kv_lora_rank = R, .rope_dim = rope});
  append(whole, 0, tk);
  std::vector<float> out(static_cast<std::size_t>(tq * H * dv)), lse(static_cast<std::size_t>(tq * H));
  inferkit::mla_attention(s, P.qview(), whole.source(0), P.weights(), {out.data(), tq, H, dv}, {lse.data(), tq, H},
                          opt);
  for (const Index chunk : {Index{1}, Index{5}, Index{8}}) {
    for (const int threads : {1, 2}) {
      INFO("chunks of " << chunk << ", " << threads << " threads");
      opt.num_threads = threads;
      inferkit::LatentCache<T> grown({.layers = 1, .kv_lora_rank = R, .rope_dim = rope});
      append(grown, 0, tk - tq);  // the cached context before the prompt's rows
      bool same = true;
      for (Index a = 0; a < tq; a += chunk) {
        const Index b = std::min(tq, a + chunk);
        append(grown, tk - tq + a, tk - tq + b);
        std::vector<float> o(static_cast<std::size_t>((b - a) * H * dv)), l(static_cast<std::size_t>((b - a) * H));
        inferkit::mla_attention(s, {P.q.data() + a * H * qd, b - a, H, qd}, grown.source(0), P.weights(),
                                {o.data(), b - a, H, dv}, {l.data(), b - a, H}, opt);
        same = same && std::equal(o.begin(), o.end(), out.begin() + a * H * dv) &&
               std::equal(l.begin(), l.end(), lse.begin() + a * H);
      }
      CHECK(same);
    }
  }
  // And the whole call is MLA: it matches the fp64 reference on the stored rows.
  std::vector<double> ref, ref_lse;
  mla_reference(P, stored_rows(whole.source(0), s.latent_dim()), s.default_scale(), true, sinks, ref, ref_lse);
  const Errors e = compare(out, lse, ref, ref_lse);
  CHECK(e.rel_rms < 2e-6);
  CHECK(e.lse_max < 2e-5);
}

}  // namespace

TEST_CASE("mla: batch-invariant rows are bitwise equal across chunkings and thread counts",
          "[attention][mla][invariant]") {
  SECTION("f32 latents, V2-Lite") { check_batch_invariant_mla<float>(kV2Lite, 12, 200, 301); }
  SECTION("bf16 latents, a small shape") {
    check_batch_invariant_mla<inferkit::BFloat16>(
        {.num_heads = 5, .kv_lora_rank = 64, .qk_nope_dim = 24, .qk_rope_dim = 32, .v_head_dim = 20}, 17, 420, 302);
  }
  SECTION("int8 latents, a small shape") {
    check_batch_invariant_mla<inferkit::LatentInt8>(
        {.num_heads = 3, .kv_lora_rank = 96, .qk_nope_dim = 8, .qk_rope_dim = 32, .v_head_dim = 32}, 9, 333, 303);
  }
}

namespace {

// Reduced arithmetic (AttentionArithmetic::kReduced) over LatentInt8 rows, per query row (t, h),
// against the absorbed form in fp64 over the stored rows with the exact query, and the bounds
// docs/design.md states ("Reduced-precision decode arithmetic"), carried through W_UV:
//   q.k: the scaled absorbed query q~ rounded to int8 per 32-value key group, sq_g =
//        max |q~_g| / 127: each score moves by at most eps_c = sum_g sq_g / 2 |k_{c,g}|_1, so the
//        weights change by factors within e^{+-2 eps} and the latent context ctx_j moves by at
//        most (e^{2 eps} - 1) sum_c p_c |k_cj - ctx_j|;
//   p.v: w = p step rounded to 15 bits (sw = max p max step / 32767), so ctx_j moves by at most
//        sum_c code_cj max p e^{2 eps} max step / 65534 (maxima over all keys: a superset of
//        the 64-key tiles), code = (k_cj - zero_c) / step_c;
//   o_h = W_UV_h ctx_h: |o' - o|_i <= sum_j |W_UV_ij| |ctx' - ctx|_j, plus float rounding.
// Returns the worst error / bound ratio and the largest error.
std::pair<double, double> reduced_mla_error(const MlaProblem& P, const std::vector<float>& rows,
                                            const std::vector<float>& got) {
  const MlaShape& s = P.s;
  const Index H = s.num_heads, R = s.kv_lora_rank, L = s.latent_dim(), nope = s.qk_nope_dim, dv = s.v_head_dim;
  const Index group = inferkit::kLatentInt8Group;
  const inferkit::QuantSpec& spec = inferkit::latent_int8_spec();
  // Each stored row's steps and zeros, from the unrounded latents as the cache quantized them.
  std::vector<double> step(static_cast<std::size_t>(P.tk * L / group)), zero(step.size());
  std::vector<float> raw(static_cast<std::size_t>(L));
  double max_step = 0;
  for (Index c = 0; c < P.tk; ++c) {
    std::copy_n(P.c.data() + c * R, R, raw.data());
    std::copy_n(P.kpe.data() + c * s.qk_rope_dim, s.qk_rope_dim, raw.data() + R);
    for (Index g = 0; g < L / group; ++g) {
      const inferkit::QuantParams qp = inferkit::choose_params(raw.data() + g * group, group, 1, spec);
      step[c * (L / group) + g] = inferkit::to_float(qp.step);
      zero[c * (L / group) + g] = qp.zero(spec);
      max_step = std::max(max_step, step[c * (L / group) + g]);
    }
  }
  const double scale = 1.0 / std::sqrt(double(s.query_dim()));
  double worst = 0, max_err = 0;
  for (Index t = 0; t < P.tq; ++t)
    for (Index h = 0; h < H; ++h) {
      std::vector<double> qa(static_cast<std::size_t>(L), 0.0), err(qa.size());
      const float* qt = P.q.data() + (t * H + h) * s.query_dim();
      for (Index r = 0; r < R; ++r)
        for (Index i = 0; i < nope; ++i) qa[r] += double(qt[i]) * P.wuk[(h * nope + i) * R + r] * scale;
      for (Index i = 0; i < s.qk_rope_dim; ++i) qa[R + i] = double(qt[nope + i]) * scale;
      for (Index g0 = 0; g0 < L; g0 += group) {
        double mx = 0;
        for (Index i = g0; i < g0 + group; ++i) mx = std::max(mx, std::abs(qa[i]));
        for (Index i = g0; i < g0 + group; ++i) err[i] = mx / 127 / 2 * (1 + 1e-5) + 1e-6 * std::abs(qa[i]);
      }
      const Index visible = P.tk - P.tq + t + 1;
      std::vector<double> p(static_cast<std::size_t>(visible));
      double mx = -INFINITY, eps = 0, z = 0, pmax = 0;
      for (Index c = 0; c < visible; ++c) {
        double a = 0, e = 0;
        for (Index i = 0; i < L; ++i) {
          a += qa[i] * rows[c * L + i];
          e += err[i] * std::abs(rows[c * L + i]);
        }
        p[c] = a;
        mx = std::max(mx, a);
        eps = std::max(eps, e);
      }
      for (auto& x : p) z += (x = std::exp(x - mx));
      for (auto& x : p) pmax = std::max(pmax, x /= z);
      const double grow = std::exp(2 * eps);
      std::vector<double> ctx(static_cast<std::size_t>(R), 0.0), dctx(ctx.size(), 0.0);
      for (Index c = 0; c < visible; ++c)
        for (Index j = 0; j < R; ++j) ctx[j] += p[c] * rows[c * L + j];
      for (Index c = 0; c < visible; ++c)
        for (Index j = 0; j < R; ++j) {
          const Index g = c * (L / group) + j / group;
          const double code = std::abs((rows[c * L + j] - zero[g]) / step[g]);
          dctx[j] += (grow - 1) * p[c] * std::abs(rows[c * L + j] - ctx[j]) + code * pmax * grow * max_step / 65534;
        }
      for (Index i = 0; i < dv; ++i) {
        double o = 0, bound = 0, mag = 0;
        for (Index j = 0; j < R; ++j) {
          const double w = P.wuv[(h * dv + i) * R + j];
          o += w * ctx[j];
          bound += std::abs(w) * dctx[j];
          mag += std::abs(w * ctx[j]);
        }
        const double e = std::abs(got[(t * H + h) * dv + i] - o);
        worst = std::max(worst, e / (bound + 1e-5 * (1 + mag)));
        max_err = std::max(max_err, e);
      }
    }
  return {worst, max_err};
}

}  // namespace

TEST_CASE("mla: reduced arithmetic over int8 latent rows stays within the stated bounds", "[attention][mla][reduced]") {
  const MlaShape small{.num_heads = 6, .kv_lora_rank = 96, .qk_nope_dim = 24, .qk_rope_dim = 32, .v_head_dim = 20};
  for (const MlaShape& s : {small, kV2Lite, kV3})
    for (const Index tq : {Index{1}, Index{3}}) {
      const Index tk = s.num_heads == 128 ? 90 : 260;
      INFO("H=" << s.num_heads << " rank=" << s.kv_lora_rank << " Tq=" << tq << " Tk=" << tk);
      const MlaProblem P(s, tq, tk, static_cast<std::uint32_t>(500 + tq + s.num_heads));
      inferkit::LatentCache<inferkit::LatentInt8> cache(
          {.layers = 1, .kv_lora_rank = s.kv_lora_rank, .rope_dim = s.qk_rope_dim});
      cache.append(0, {P.c.data(), tk, s.kv_lora_rank}, {P.kpe.data(), tk, s.qk_rope_dim});
      const auto run = [&](inferkit::AttentionArithmetic a) {
        std::vector<float> out(static_cast<std::size_t>(tq * s.num_heads * s.v_head_dim));
        inferkit::AttentionOptions opt{.causal = true};
        opt.arithmetic = a;
        inferkit::mla_attention(s, P.qview(), cache.source(0), P.weights(), {out.data(), tq, s.num_heads, s.v_head_dim},
                                opt);
        return out;
      };
      const std::vector<float> reduced = run(inferkit::AttentionArithmetic::kReduced);
      const std::vector<float> rows = stored_rows(cache.source(0), s.latent_dim());
      const auto [ratio, max_err] = reduced_mla_error(P, rows, reduced);
      INFO("error / bound " << ratio << ", max |error| " << max_err);
      CHECK(ratio <= 1.0);
      // The rounding happened (the bound is not checked against exact arithmetic by accident).
      CHECK(test::max_abs_diff(reduced, run(inferkit::AttentionArithmetic::kExact)) > 1e-5);
    }
}

TEST_CASE("mla: bf16 up-projections give the fp64 reference of the bf16-rounded weights", "[attention][mla][bf16]") {
  const MlaShape small{.num_heads = 3, .kv_lora_rank = 40, .qk_nope_dim = 8, .qk_rope_dim = 16, .v_head_dim = 12};
  for (const MlaShape& s : {small, kV2Lite})
    for (const Index tq : {Index{1}, Index{4}}) {
      INFO("H=" << s.num_heads << " rank=" << s.kv_lora_rank << " Tq=" << tq);
      MlaProblem P(s, tq, 150, static_cast<std::uint32_t>(900 + tq + s.num_heads));
      // The reference runs on the rounded weights: bf16 weights widen exactly, so the kernel's
      // arithmetic is f32 over them (float rounding only).
      const auto to_bf16 = [](std::vector<float>& w) {
        std::vector<inferkit::BFloat16> b(w.size());
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = inferkit::to_float(b[i] = inferkit::to_bfloat16(w[i]));
        return b;
      };
      const std::vector<inferkit::BFloat16> wuk = to_bf16(P.wuk), wuv = to_bf16(P.wuv);
      inferkit::LatentCache<float> cache({.layers = 1, .kv_lora_rank = s.kv_lora_rank, .rope_dim = s.qk_rope_dim});
      cache.append(0, {P.c.data(), P.tk, s.kv_lora_rank}, {P.kpe.data(), P.tk, s.qk_rope_dim});
      const inferkit::MlaWeightsBf16 w{{wuk.data(), s.num_heads, s.qk_nope_dim, s.kv_lora_rank},
                                       {wuv.data(), s.num_heads, s.v_head_dim, s.kv_lora_rank}};
      std::vector<float> out(static_cast<std::size_t>(tq * s.num_heads * s.v_head_dim)),
          lse(static_cast<std::size_t>(tq * s.num_heads));
      inferkit::mla_attention(s, P.qview(), cache.source(0), w, {out.data(), tq, s.num_heads, s.v_head_dim},
                              {lse.data(), tq, s.num_heads}, {.causal = true});
      std::vector<double> ref, ref_lse;
      mla_reference(P, stored_rows(cache.source(0), s.latent_dim()), s.default_scale(), true, {}, ref, ref_lse);
      const Errors e = compare(out, lse, ref, ref_lse);
      CHECK(e.rel_rms < 2e-6);
      CHECK(e.lse_max < 2e-5);
      // The f32 weights (the same rounded values) give the same result to float rounding.
      std::vector<float> out32(out.size());
      inferkit::mla_attention(s, P.qview(), cache.source(0), P.weights(), {out32.data(), tq, s.num_heads, s.v_head_dim},
                              {.causal = true});
      CHECK(test::max_abs_diff(out, out32) < 1e-5);
      // Shapes are checked by name as for f32 weights.
      const inferkit::MlaWeightsBf16 bad{{wuk.data(), s.num_heads, s.qk_nope_dim + 1, s.kv_lora_rank - 1}, w.w_uv};
      CHECK_THROWS_WITH(inferkit::mla_attention(s, P.qview(), cache.source(0), bad,
                                                {out.data(), tq, s.num_heads, s.v_head_dim}, {.causal = true}),
                        Catch::Contains("weights.w_uk.dim1()"));
    }
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
