#include "attention/attention_test_util.hpp"

using test::Case;
using test::check_against_reference;

TEST_CASE("decode matches the fp64 reference for 1 to 8 query rows", "[attention][decode]") {
  std::mt19937 rng(77);
  const int heads[][2] = {{1, 1}, {8, 8}, {32, 8}, {8, 1}, {6, 2}};
  const Index dims[] = {3, 8, 13, 64, 80, 128};
  for (int trial = 0; trial < 50; ++trial) {
    Case c;
    const auto& hh = heads[rng() % 5];
    c.hq = hh[0];
    c.hkv = hh[1];
    c.d = dims[rng() % 6];
    c.tq = 1 + static_cast<Index>(rng() % 8);
    c.tk = c.tq + static_cast<Index>(rng() % 700);
    c.opt.causal = rng() % 4 != 0;
    c.opt.window = rng() % 3 == 0 ? 1 + static_cast<Index>(rng() % 300) : 0;
    c.opt.alibi = rng() % 3 == 0;
    c.opt.softcap = rng() % 4 == 0 ? 3.0f : 0.0f;
    c.opt.kv_split_tokens = rng() % 2 ? 1 + static_cast<Index>(rng() % 200) : 0;
    c.seed = static_cast<std::uint32_t>(500 + trial);
    check_against_reference(c);
  }
}

TEST_CASE("decode with 16-bit K/V and head_dim off the vector width", "[attention][decode]") {
  for (Index d : {8, 20, 128}) {
    Case c{.tq = 1, .tk = 1000, .hq = 8, .hkv = 2, .d = d};
    c.opt.kv_split_tokens = 300;
    check_against_reference<inferkit::BFloat16>(c);
    check_against_reference<inferkit::Float16>(c);
  }
}

TEST_CASE("split-KV decode equals the unsplit result", "[attention][decode]") {
  Case c{.tq = 2, .tk = 5000, .hq = 4, .hkv = 1, .d = 64};
  c.opt.kv_split_tokens = 100000;  // one split
  const auto whole = test::run_case<float>(c, false);
  for (Index split : {1, 63, 64, 777, 4999}) {
    c.opt.kv_split_tokens = split;
    const auto parts = test::run_case<float>(c, false);
    INFO("split = " << split);
    CHECK(test::max_abs_diff(whole.out, parts.out) < 2e-6);
    CHECK(test::max_abs_diff(whole.lse, parts.lse) < 2e-5);
  }
}

TEST_CASE("decode results for 1 and 2 threads agree", "[attention][decode][threads]") {
  Case c{.tq = 1, .tk = 9000, .hq = 8, .hkv = 2, .d = 128};
  c.opt.num_threads = 1;
  const auto one = test::run_case<float>(c, false);
  c.opt.num_threads = 2;
  const auto two = test::run_case<float>(c, false);
  CHECK(one.out == two.out);  // the split depends on the shape only, so the bits agree
  CHECK(one.lse == two.lse);
}

TEST_CASE("two partial attentions merged by LSE equal attention over all keys", "[attention][merge]") {
  // Cascade / shared-prefix attention: keys [0, 300) and [300, 700) attended separately.
  const Index tq = 3, hq = 4, hkv = 2, d = 32, tk = 700, split = 300;
  const auto q = test::random_normal(static_cast<std::size_t>(tq * hq * d), 1);
  const auto k = test::random_normal(static_cast<std::size_t>(tk * hkv * d), 2);
  const auto v = test::random_normal(static_cast<std::size_t>(tk * hkv * d), 3);
  inferkit::Tensor3View<const float> qv(q.data(), tq, hq, d), kv_all(k.data(), tk, hkv, d),
      vv_all(v.data(), tk, hkv, d);
  inferkit::AttentionOptions opt;
  opt.causal = false;
  std::vector<float> whole(q.size()), lse_whole(static_cast<std::size_t>(tq * hq));
  inferkit::attention(qv, inferkit::DenseKv<float>(kv_all, vv_all),
                      inferkit::Tensor3View<float>(whole.data(), tq, hq, d),
                      inferkit::MatrixView<float>(lse_whole.data(), tq, hq), opt);
  std::vector<float> a(q.size()), b(q.size()), la(lse_whole.size()), lb(lse_whole.size());
  inferkit::attention(qv, inferkit::DenseKv<float>(kv_all.slice0(0, split), vv_all.slice0(0, split)),
                      inferkit::Tensor3View<float>(a.data(), tq, hq, d), inferkit::MatrixView<float>(la.data(), tq, hq),
                      opt);
  inferkit::attention(
      qv, inferkit::DenseKv<float>(kv_all.slice0(split, tk - split), vv_all.slice0(split, tk - split), split),
      inferkit::Tensor3View<float>(b.data(), tq, hq, d), inferkit::MatrixView<float>(lb.data(), tq, hq), opt);
  std::vector<float> merged(q.size());
  for (Index r = 0; r < tq * hq; ++r) {
    const auto row = [&](std::vector<float>& x) {
      return std::span<float>(x.data() + r * d, static_cast<std::size_t>(d));
    };
    const float lse = inferkit::merge_attention_states(row(a), la[r], row(b), lb[r], row(merged));
    CHECK(lse == Approx(lse_whole[r]).margin(1e-5));
  }
  CHECK(test::max_abs_diff(merged, whole) < 1e-5);
}
