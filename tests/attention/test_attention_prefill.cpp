#include "attention/attention_test_util.hpp"

using test::Case;
using test::check_against_reference;

TEST_CASE("prefill matches the fp64 reference over random shapes", "[attention][prefill]") {
  std::mt19937 rng(2024);
  const int heads[][2] = {{1, 1}, {4, 4}, {8, 2}, {6, 3}, {8, 1}, {12, 4}};
  const Index dims[] = {1, 5, 8, 13, 16, 64, 80, 96, 128};
  for (int trial = 0; trial < 60; ++trial) {
    Case c;
    const auto& hh = heads[rng() % 6];
    c.hq = hh[0];
    c.hkv = hh[1];
    c.d = dims[rng() % 9];
    c.tq = 9 + static_cast<Index>(rng() % 150);
    c.tk = c.tq + static_cast<Index>(rng() % 100) * (rng() % 2);
    c.opt.causal = rng() % 4 != 0;
    c.opt.window = rng() % 3 == 0 ? 1 + static_cast<Index>(rng() % 70) : 0;
    c.opt.alibi = rng() % 3 == 0;
    c.opt.softcap = rng() % 4 == 0 ? 5.0f : 0.0f;
    if (rng() % 3 == 0) c.opt.scale = 0.05f + float(rng() % 100) / 200.0f;
    c.seed = static_cast<std::uint32_t>(trial * 7 + 1);
    check_against_reference(c);
  }
}

TEST_CASE("prefill with keys shorter than a tile and a single query head", "[attention][prefill]") {
  for (Index tk : {9, 17, 63, 64, 65}) {
    Case c{.tq = 9, .tk = tk, .hq = 1, .hkv = 1, .d = 32};
    check_against_reference(c);
    c.opt.causal = false;
    check_against_reference(c);
  }
}

TEST_CASE("prefill reads bf16 and f16 K/V like the reference on the same values", "[attention][prefill]") {
  Case c{.tq = 70, .tk = 130, .hq = 8, .hkv = 2, .d = 64};
  check_against_reference<inferkit::BFloat16>(c);
  check_against_reference<inferkit::Float16>(c);
  c.d = 20;  // not a multiple of the vector width
  check_against_reference<inferkit::BFloat16>(c);
}

TEST_CASE("prefill ALiBi for 1 to 64 heads", "[attention][prefill][alibi]") {
  for (Index hq : {1, 2, 3, 5, 8, 12, 16, 20, 32, 64}) {
    Case c{.tq = 20, .tk = 40, .hq = hq, .hkv = 1, .d = 8};
    c.opt.alibi = true;
    c.seed = static_cast<std::uint32_t>(hq);
    check_against_reference(c);
  }
}

TEST_CASE("prefill honours positions offsets and explicit query positions", "[attention][prefill]") {
  Case c{.tq = 33, .tk = 90, .hq = 4, .hkv = 2, .d = 16};
  c.opt.alibi = true;
  c.opt.window = 20;
  check_against_reference(c, 2e-5, 1000);  // keys at 1000..1089
  std::vector<std::int32_t> qpos(33);
  for (int i = 0; i < 33; ++i) qpos[i] = 40 + 2 * i;  // queries spread through the keys
  c.opt.query_positions = qpos;
  check_against_reference(c);
}

TEST_CASE("fully masked rows give zeros and LSE = -inf", "[attention][prefill][decode]") {
  for (Index tq : {1, 12}) {
    Case c{.tq = tq, .tk = 50, .hq = 2, .hkv = 1, .d = 8};
    std::vector<std::int32_t> qpos(static_cast<std::size_t>(tq));
    for (Index i = 0; i < tq; ++i) qpos[i] = static_cast<std::int32_t>(i) - 3;  // rows 0..2 precede every key
    c.opt.query_positions = qpos;
    const auto got = test::run_case<float>(c, false);
    for (Index i = 0; i < std::min<Index>(3, tq); ++i)
      for (Index h = 0; h < 2; ++h) {
        CHECK(got.lse[i * 2 + h] == -INFINITY);
        for (Index k = 0; k < 8; ++k) CHECK(got.out[(i * 2 + h) * 8 + k] == 0.0f);
      }
    check_against_reference(c);
  }
  // No keys at all.
  Case empty{.tq = 3, .tk = 0, .hq = 2, .hkv = 2, .d = 8};
  const auto got = test::run_case<float>(empty, false);
  for (float x : got.out) CHECK(x == 0.0f);
  for (float x : got.lse) CHECK(x == -INFINITY);
}

TEST_CASE("masks and ALiBi stay exact when positions lie 2^23 or more apart", "[attention][prefill][decode]") {
  // Float positions relative to a tile's first key would round here (found by fuzzing: a key
  // 2^31 away made a later key visible to an earlier query); the kernels compare integers.
  const Index tk = 140, hq = 4, hkv = 2, d = 8;
  std::vector<std::int32_t> kpos(static_cast<std::size_t>(tk));
  for (Index j = 0; j < tk; ++j)
    kpos[j] = j % 3 == 0   ? -2147483600 + static_cast<std::int32_t>(j)
              : j % 3 == 1 ? static_cast<std::int32_t>(j)
                           : 2147483500 + static_cast<std::int32_t>(j);
  const std::vector<std::int32_t> all_q = {-4,          0,          5,          60,       139, -2147483590,
                                           -2147483500, 2147483600, 2147483647, 20000000, 7,   3};
  const auto k = test::random_normal(static_cast<std::size_t>(tk * hkv * d), 5), v = test::random_normal(k.size(), 6);
  const std::vector<float> tiny_slopes = {1e-9f, 2e-9f, 4e-9f, 1e-8f};
  inferkit::DenseKv<float> kv(inferkit::Tensor3View<const float>(k.data(), tk, hkv, d),
                              inferkit::Tensor3View<const float>(v.data(), tk, hkv, d),
                              std::span<const std::int32_t>(kpos));
  for (Index tq : {Index{1}, Index{3}, Index{12}})
    for (int variant = 0; variant < 8; ++variant) {
      inferkit::AttentionOptions opt;
      opt.causal = variant % 2 == 0;
      opt.window = variant % 4 < 2 ? 7 : 0;
      if (!opt.causal && opt.window == 0) opt.window = 100;
      opt.batch_invariant = variant >= 4;
      // Slopes so small that a 2^31 distance stays a moderate score (below 22).
      if (variant % 3 == 0) opt.alibi_slopes = tiny_slopes;
      const std::vector<std::int32_t> qpos(all_q.end() - tq, all_q.end());
      opt.query_positions = qpos;
      INFO("tq=" << tq << " variant=" << variant);
      const auto q = test::random_normal(static_cast<std::size_t>(tq * hq * d), 7 + static_cast<std::uint32_t>(tq));
      std::vector<float> out(q.size()), ref(q.size()), lse(static_cast<std::size_t>(tq * hq)), ref_lse(lse.size());
      const inferkit::Tensor3View<const float> qv(q.data(), tq, hq, d);
      inferkit::attention(qv, kv, inferkit::Tensor3View<float>(out.data(), tq, hq, d),
                          inferkit::MatrixView<float>(lse.data(), tq, hq), opt);
      inferkit::attention_reference(qv, kv, inferkit::Tensor3View<float>(ref.data(), tq, hq, d),
                                    inferkit::MatrixView<float>(ref_lse.data(), tq, hq), opt);
      CHECK(test::max_abs_diff(out, ref) <= 2e-5);
      CHECK(test::max_abs_diff(lse, ref_lse) <= 1e-4);
    }
}

TEST_CASE("prefill result does not depend on the thread count", "[attention][prefill][threads]") {
  Case c{.tq = 200, .tk = 260, .hq = 8, .hkv = 2, .d = 64};
  c.opt.num_threads = 1;
  const auto one = test::run_case<float>(c, false);
  c.opt.num_threads = 2;
  const auto two = test::run_case<float>(c, false);
  CHECK(one.out == two.out);
  CHECK(one.lse == two.lse);
}
