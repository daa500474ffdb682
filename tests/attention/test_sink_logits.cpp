// AttentionOptions::sink_logits (learned attention sinks, gpt-oss) in every attention path,
// against the fp64 reference extended with the sink (attention/reference.hpp) and against the
// closed forms the semantics imply (attention/options.hpp): a sink is the partial (o = 0,
// lse = S), so out_S = out * e^lse / (e^lse + e^S) and lse_S = log(e^lse + e^S).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "attention/batch_test_util.hpp"
#include "inferkit/kv/quantized_cache.hpp"

using inferkit::Index;
using test::Case;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Sink logits of hq heads around the scores' own scale (|s| is a few units for unit-normal q, k).
std::vector<float> random_sinks(Index hq, std::uint32_t seed) {
  auto s = test::random_normal(static_cast<std::size_t>(hq), seed, 2.0f);
  for (auto& x : s) x += 1.0f;
  return s;
}

// The closed form of adding sink S to a sink-free row (o, lse), in double.
void expect_sink_closed_form(const test::Result& plain, const test::Result& sunk, std::span<const float> sinks,
                             Index rows, Index hq, Index d, double tol) {
  for (Index t = 0; t < rows; ++t)
    for (Index h = 0; h < hq; ++h) {
      const double lse = plain.lse[t * hq + h], s = sinks[h];
      const double m = std::max(lse, s);
      const double z = (std::isinf(lse) ? 0.0 : std::exp(lse - m)) + std::exp(s - m);
      const double keep = std::isinf(lse) ? 0.0 : std::exp(lse - m) / z;
      CHECK(std::abs(sunk.lse[t * hq + h] - (m + std::log(z))) <= 4 * tol);
      for (Index k = 0; k < d; ++k) {
        const std::size_t i = static_cast<std::size_t>((t * hq + h) * d + k);
        CHECK(std::abs(sunk.out[i] - plain.out[i] * keep) <= tol);
      }
    }
}

}  // namespace

TEST_CASE("sinks: decode and prefill match the fp64 reference with the sink", "[attention][sink]") {
  std::mt19937 rng(321);
  const int heads[][2] = {{1, 1}, {8, 8}, {32, 8}, {8, 1}, {6, 2}};
  const Index dims[] = {8, 13, 64, 128};
  for (int trial = 0; trial < 40; ++trial) {
    Case c;
    const auto& hh = heads[rng() % 5];
    c.hq = hh[0];
    c.hkv = hh[1];
    c.d = dims[rng() % 4];
    c.tq = trial % 2 ? 1 + static_cast<Index>(rng() % 8) : 9 + static_cast<Index>(rng() % 120);  // decode / prefill
    c.tk = c.tq + static_cast<Index>(rng() % 600);
    c.opt.causal = rng() % 4 != 0;
    c.opt.window = rng() % 3 == 0 ? 1 + static_cast<Index>(rng() % 200) : 0;
    c.opt.alibi = rng() % 3 == 0;
    c.opt.softcap = rng() % 4 == 0 ? 3.0f : 0.0f;
    c.opt.kv_split_tokens = rng() % 2 ? 1 + static_cast<Index>(rng() % 200) : 0;
    c.opt.batch_invariant = rng() % 4 == 0;
    if (c.opt.batch_invariant) c.opt.kv_split_tokens = 64 * static_cast<Index>(rng() % 3);
    const auto sinks = random_sinks(c.hq, 900 + trial);
    c.opt.sink_logits = sinks;
    c.seed = static_cast<std::uint32_t>(700 + trial);
    INFO("invariant=" << c.opt.batch_invariant);
    test::check_against_reference(c);
    test::check_against_reference<inferkit::BFloat16>(c);
  }
}

TEST_CASE("sinks: S = -inf is plain attention bit for bit in every path", "[attention][sink]") {
  for (Index tq : {1, 5, 200})
    for (bool invariant : {false, true}) {
      Case c{.tq = tq, .tk = 1500, .hq = 8, .hkv = 2, .d = 64};
      c.opt.kv_split_tokens = invariant ? 128 : 300;
      c.opt.batch_invariant = invariant;
      const auto plain = test::run_case<float>(c, false);
      const std::vector<float> none(8, -kInf);
      c.opt.sink_logits = none;
      const auto sunk = test::run_case<float>(c, false);
      INFO("Tq=" << tq << " invariant=" << invariant);
      CHECK(plain.out == sunk.out);
      CHECK(plain.lse == sunk.lse);
      // The reference agrees too (its plain and -inf-sink forms are the same sums).
      const auto ref = test::run_case<float>(c, true);
      CHECK(test::max_abs_diff(ref.out, sunk.out) <= 2e-5);
    }
}

TEST_CASE("sinks: S -> +inf sends the output to 0; fully masked rows give 0 and LSE = S", "[attention][sink]") {
  for (Index tq : {1, 4, 100}) {
    INFO("Tq=" << tq);
    Case c{.tq = tq, .tk = 700, .hq = 4, .hkv = 2, .d = 32};
    c.opt.kv_split_tokens = 200;
    const std::vector<float> huge(4, 1e30f);
    c.opt.sink_logits = huge;
    const auto r = test::run_case<float>(c, false);
    for (float x : r.out) CHECK(x == 0.0f);
    for (float l : r.lse) CHECK(l == 1e30f);
    // S = 60 (e^60 >> e^s for |s| of a few units): the output is below 1e-20.
    const std::vector<float> big(4, 60.0f);
    c.opt.sink_logits = big;
    const auto r2 = test::run_case<float>(c, false);
    for (float x : r2.out) CHECK(std::abs(x) < 1e-20f);

    // Every key masked (queries before the first key, causal): zeros, never NaN, LSE = S.
    const auto sinks = random_sinks(4, 5);
    c.opt.sink_logits = sinks;
    std::vector<std::int32_t> before(static_cast<std::size_t>(tq), -1);
    c.opt.query_positions = before;
    for (bool invariant : {false, true}) {
      c.opt.batch_invariant = invariant;
      c.opt.kv_split_tokens = invariant ? 64 : 200;
      const auto m = test::run_case<float>(c, false);
      for (float x : m.out) CHECK(x == 0.0f);
      for (Index i = 0; i < tq * 4; ++i) CHECK(m.lse[i] == sinks[i % 4]);
    }
  }
}

TEST_CASE("sinks: split-KV decode equals one pass; the sink enters exactly once", "[attention][sink][decode]") {
  Case c{.tq = 2, .tk = 5000, .hq = 8, .hkv = 2, .d = 64};
  const auto sinks = random_sinks(8, 17);
  c.opt.sink_logits = sinks;
  c.opt.kv_split_tokens = 100000;  // one split
  const auto whole = test::run_case<float>(c, false);
  c.opt.sink_logits = {};
  const auto plain = test::run_case<float>(c, false);
  expect_sink_closed_form(plain, whole, sinks, 2, 8, 64, 2e-6);
  c.opt.sink_logits = sinks;
  for (Index split : {1, 63, 777, 4999}) {
    c.opt.kv_split_tokens = split;
    const auto parts = test::run_case<float>(c, false);
    INFO("split = " << split);
    CHECK(test::max_abs_diff(whole.out, parts.out) < 2e-6);
    CHECK(test::max_abs_diff(whole.lse, parts.lse) < 2e-5);
  }
  // 1 and 2 threads: the same bits.
  c.opt.kv_split_tokens = 0;
  c.opt.num_threads = 1;
  const auto one = test::run_case<float>(c, false);
  c.opt.num_threads = 2;
  const auto two = test::run_case<float>(c, false);
  CHECK(one.out == two.out);
  CHECK(one.lse == two.lse);
}

TEST_CASE("sinks: merge_attention_states is exact when one partial carries the sink", "[attention][sink][merge]") {
  const Index tq = 3, tk = 900, hq = 4, hkv = 2, d = 16, cut = 400;
  const auto q = test::random_normal(tq * hq * d, 1), k = test::random_normal(tk * hkv * d, 2),
             v = test::random_normal(tk * hkv * d, 3);
  const auto sinks = random_sinks(hq, 4);
  inferkit::DenseKv<float> all({k.data(), tk, hkv, d}, {v.data(), tk, hkv, d});
  inferkit::DenseKv<float> first({k.data(), cut, hkv, d}, {v.data(), cut, hkv, d});
  inferkit::DenseKv<float> second({k.data() + cut * hkv * d, tk - cut, hkv, d},
                                  {v.data() + cut * hkv * d, tk - cut, hkv, d}, static_cast<std::int32_t>(cut));
  const std::vector<std::int32_t> pos = {tk - 3, tk - 2, tk - 1};
  const auto run = [&](const auto& src, bool with_sink, std::vector<float>& o, std::vector<float>& l) {
    o.assign(static_cast<std::size_t>(tq * hq * d), 0.0f);
    l.assign(static_cast<std::size_t>(tq * hq), 0.0f);
    inferkit::AttentionOptions opt{.query_positions = pos};
    if (with_sink) opt.sink_logits = sinks;
    inferkit::attention({q.data(), tq, hq, d}, src, {o.data(), tq, hq, d}, {l.data(), tq, hq}, opt);
  };
  std::vector<float> ow, lw, oa, la, ob, lb, om(static_cast<std::size_t>(tq * hq * d)), lm(tq * hq);
  run(all, true, ow, lw);
  run(first, true, oa, la);
  run(second, false, ob, lb);
  inferkit::merge_attention_states({oa.data(), tq, hq, d}, {la.data(), tq, hq}, {ob.data(), tq, hq, d},
                                   {lb.data(), tq, hq}, {om.data(), tq, hq, d}, {lm.data(), tq, hq});
  CHECK(test::max_abs_diff(om, ow) < 2e-6);
  CHECK(test::max_abs_diff(lm, lw) < 1e-5);
  // The sink as a partial of its own: (0, S) merged into the sink-free result over all keys.
  run(all, false, oa, la);
  const std::vector<float> zeros(static_cast<std::size_t>(tq * hq * d), 0.0f);
  std::vector<float> ls(static_cast<std::size_t>(tq * hq));
  for (Index i = 0; i < tq * hq; ++i) ls[i] = sinks[i % hq];
  inferkit::merge_attention_states({oa.data(), tq, hq, d}, {la.data(), tq, hq}, {zeros.data(), tq, hq, d},
                                   {ls.data(), tq, hq}, {om.data(), tq, hq, d}, {lm.data(), tq, hq});
  CHECK(test::max_abs_diff(om, ow) < 2e-6);
  CHECK(test::max_abs_diff(lm, lw) < 1e-5);
}

TEST_CASE("sinks: varlen and paged batches match the per-sequence reference", "[attention][sink][batch]") {
  const Index hq = 8, hkv = 2, d = 32;
  const auto sinks = random_sinks(hq, 8);
  for (bool invariant : {false, true}) {
    INFO("invariant=" << invariant);
    inferkit::AttentionOptions opt{.batch_invariant = invariant, .sink_logits = sinks};
    // Paged: decode rows, a prefill chunk, an empty sequence, one with no queries.
    test::PagedBatch<float> pb(hkv, d, 16, 400);
    const std::vector<Index> lens = {700, 1, 300, 0, 50};
    const std::vector<Index> counts = {1, 1, 100, 0, 4};
    for (std::size_t s = 0; s < lens.size(); ++s) {
      pb.add();
      pb.append(s, lens[s], static_cast<std::uint32_t>(40 + s));
    }
    const auto cu = test::offsets(counts);
    const auto q = test::random_normal(static_cast<std::size_t>(cu.back() * hq * d), 9);
    const auto sources = pb.sources();
    const auto ref = test::reference_batch(q, hq, d, cu, sources, opt);
    test::Result got{std::vector<float>(ref.out.size()), std::vector<float>(ref.lse.size())};
    inferkit::attention_batch({q.data(), cu.back(), hq, d}, cu, sources, {got.out.data(), cu.back(), hq, d},
                              {got.lse.data(), cu.back(), hq}, opt);
    CHECK(test::max_abs_diff(got.out, ref.out) < 2e-5);
    CHECK(test::max_abs_diff(got.lse, ref.lse) < 8e-5);

    // Varlen over packed dense K/V.
    const std::vector<std::int32_t> cu_q = {0, 1, 81, 84}, cu_k = {0, 500, 600, 1300};
    const auto k = test::random_normal(1300 * hkv * d, 10), v = test::random_normal(1300 * hkv * d, 11);
    const auto qv = test::random_normal(84 * hq * d, 12);
    std::vector<float> out(84 * hq * d), lse(84 * hq), rout(84 * hq * d), rlse(84 * hq);
    inferkit::attention_varlen<float>({qv.data(), 84, hq, d}, cu_q, {k.data(), 1300, hkv, d}, {v.data(), 1300, hkv, d},
                                      cu_k, {out.data(), 84, hq, d}, {lse.data(), 84, hq}, opt);
    for (int b = 0; b < 3; ++b) {
      const Index q0 = cu_q[b], nq = cu_q[b + 1] - q0, k0 = cu_k[b], nk = cu_k[b + 1] - k0;
      inferkit::DenseKv<float> src({k.data() + k0 * hkv * d, nk, hkv, d}, {v.data() + k0 * hkv * d, nk, hkv, d});
      inferkit::attention_reference({qv.data() + q0 * hq * d, nq, hq, d}, src, {rout.data() + q0 * hq * d, nq, hq, d},
                                    {rlse.data() + q0 * hq, nq, hq}, opt);
    }
    CHECK(test::max_abs_diff(out, rout) < 2e-5);
    CHECK(test::max_abs_diff(lse, rlse) < 8e-5);
  }
}

TEST_CASE("sinks: quantized sources, exact and reduced arithmetic", "[attention][sink][reduced]") {
  const Index hq = 8, hkv = 2, d = 128, tk = 530;
  const auto sinks = random_sinks(hq, 21);
  const auto k = test::random_normal(tk * hkv * d, 22), v = test::random_normal(tk * hkv * d, 23);
  for (const char* preset : {"int8", "int4", "kivi2"}) {
    INFO(preset);
    inferkit::QuantizedKvCache cache(1, hkv, d, inferkit::kv_quant_preset(preset, d));
    cache.append(0, {k.data(), tk, hkv, d}, {v.data(), tk, hkv, d});
    const auto src = cache.source(0);
    for (Index tq : {1, 3, 40}) {
      INFO("Tq=" << tq);
      const auto q = test::random_normal(tq * hq * d, 24);
      const auto run = [&](inferkit::AttentionOptions opt, bool reference) {
        test::Result r{std::vector<float>(static_cast<std::size_t>(tq * hq * d)),
                       std::vector<float>(static_cast<std::size_t>(tq * hq))};
        if (reference)
          inferkit::attention_reference({q.data(), tq, hq, d}, src, {r.out.data(), tq, hq, d}, {r.lse.data(), tq, hq},
                                        opt);
        else
          inferkit::attention({q.data(), tq, hq, d}, src, {r.out.data(), tq, hq, d}, {r.lse.data(), tq, hq}, opt);
        return r;
      };
      // Exact arithmetic over the dequantized rows: the fp64 reference with the sink.
      const auto got = run({.sink_logits = sinks}, false), ref = run({.sink_logits = sinks}, true);
      CHECK(test::max_abs_diff(got.out, ref.out) < 2e-5);
      CHECK(test::max_abs_diff(got.lse, ref.lse) < 8e-5);
      // Reduced arithmetic: the sink applies to the reduced result in closed form.
      const auto plain = run({.arithmetic = inferkit::AttentionArithmetic::kReduced}, false);
      const auto sunk = run({.arithmetic = inferkit::AttentionArithmetic::kReduced, .sink_logits = sinks}, false);
      expect_sink_closed_form(plain, sunk, sinks, tq, hq, d, 2e-6);
    }
  }
}

TEST_CASE("sinks: bad sink logits are rejected by name", "[attention][sink][errors]") {
  const Index d = 8;
  const auto q = test::random_normal(2 * 4 * d, 1), k = test::random_normal(10 * 2 * d, 2);
  inferkit::DenseKv<float> kv({k.data(), 10, 2, d}, {k.data(), 10, 2, d});
  std::vector<float> out(2 * 4 * d);
  const auto call = [&](std::vector<float> s) {
    inferkit::attention({q.data(), 2, 4, d}, kv, {out.data(), 2, 4, d}, {.sink_logits = s});
  };
  CHECK_THROWS_WITH(call({0.0f, 1.0f, 2.0f}), Catch::Contains("sink_logits.size()") && Catch::Contains("4"));
  CHECK_THROWS_WITH(call({0.0f, NAN, 2.0f, 3.0f}), Catch::Contains("sink_logits[1]"));
  CHECK_THROWS_WITH(call({0.0f, 1.0f, kInf, 3.0f}), Catch::Contains("sink_logits[2]"));
  CHECK_NOTHROW(call({0.0f, -kInf, 2.0f, 3.0f}));
  inferkit::SoftmaxStats st;
  CHECK_THROWS_WITH(inferkit::online_softmax_add_sink(st, NAN), Catch::Contains("sink"));
}
