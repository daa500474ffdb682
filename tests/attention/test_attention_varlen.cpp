#include "attention/attention_test_util.hpp"

namespace {

// Runs a packed batch through attention_varlen and each sequence alone through the reference.
void check_varlen(const std::vector<std::int32_t>& qlens, const std::vector<std::int32_t>& klens,
                  inferkit::AttentionOptions opt, std::uint32_t seed) {
  const Index hq = 4, hkv = 2, d = 24;
  std::vector<std::int32_t> cu_q{0}, cu_k{0};
  for (std::size_t b = 0; b < qlens.size(); ++b) {
    cu_q.push_back(cu_q.back() + qlens[b]);
    cu_k.push_back(cu_k.back() + klens[b]);
  }
  const Index tq = cu_q.back(), tk = cu_k.back();
  const auto q = test::random_normal(static_cast<std::size_t>(tq * hq * d), seed);
  const auto k = test::random_normal(static_cast<std::size_t>(tk * hkv * d), seed + 1);
  const auto v = test::random_normal(static_cast<std::size_t>(tk * hkv * d), seed + 2);
  std::vector<float> out(q.size(), -9.0f), lse(static_cast<std::size_t>(tq * hq), -9.0f);
  inferkit::Tensor3View<const float> qv(q.data(), tq, hq, d), kv(k.data(), tk, hkv, d), vv(v.data(), tk, hkv, d);
  inferkit::attention_varlen<float>(qv, cu_q, kv, vv, cu_k, inferkit::Tensor3View<float>(out.data(), tq, hq, d),
                                    inferkit::MatrixView<float>(lse.data(), tq, hq), opt);
  for (std::size_t b = 0; b < qlens.size(); ++b) {
    INFO("sequence " << b << ": Tq = " << qlens[b] << ", Tk = " << klens[b]);
    const Index nq = qlens[b], nk = klens[b];
    std::vector<float> ro(static_cast<std::size_t>(nq * hq * d)), rl(static_cast<std::size_t>(nq * hq));
    inferkit::attention_reference(
        qv.slice0(cu_q[b], nq), inferkit::DenseKv<float>(kv.slice0(cu_k[b], nk), vv.slice0(cu_k[b], nk)),
        inferkit::Tensor3View<float>(ro.data(), nq, hq, d), inferkit::MatrixView<float>(rl.data(), nq, hq), opt);
    const std::vector<float> go(out.begin() + cu_q[b] * hq * d, out.begin() + cu_q[b + 1] * hq * d);
    const std::vector<float> gl(lse.begin() + cu_q[b] * hq, lse.begin() + cu_q[b + 1] * hq);
    CHECK(test::max_abs_diff(go, ro) < 2e-5);
    CHECK(test::max_abs_diff(gl, rl) < 1e-4);
  }
}

}  // namespace

TEST_CASE("varlen batch equals each sequence alone (lengths 0, 1 and mixed)", "[attention][varlen]") {
  inferkit::AttentionOptions opt;
  check_varlen({0, 1, 5, 130, 1, 0, 77}, {0, 1, 9, 130, 40, 3, 200}, opt, 1);
  opt.window = 16;
  opt.alibi = true;
  check_varlen({64, 3, 100}, {64, 500, 100}, opt, 2);
  opt = {};
  opt.causal = false;
  check_varlen({12, 7}, {12, 1}, opt, 3);
}

TEST_CASE("varlen with 16-bit keys and values", "[attention][varlen]") {
  const Index hq = 2, hkv = 1, d = 16;
  const std::vector<std::int32_t> cu_q{0, 10, 11}, cu_k{0, 10, 40};
  const auto q = test::random_normal(11 * hq * d, 4);
  const auto kf = test::random_normal(40 * hkv * d, 5), vf = test::random_normal(40 * hkv * d, 6);
  const auto k = test::to_storage<inferkit::BFloat16>(kf), v = test::to_storage<inferkit::BFloat16>(vf);
  std::vector<float> out(q.size()), ref(q.size());
  inferkit::Tensor3View<const float> qv(q.data(), 11, hq, d);
  inferkit::Tensor3View<const inferkit::BFloat16> kv(k.data(), 40, hkv, d), vv(v.data(), 40, hkv, d);
  inferkit::attention_varlen<inferkit::BFloat16>(qv, cu_q, kv, vv, cu_k,
                                                 inferkit::Tensor3View<float>(out.data(), 11, hq, d));
  for (int b = 0; b < 2; ++b) {
    const Index nq = cu_q[b + 1] - cu_q[b], nk = cu_k[b + 1] - cu_k[b];
    inferkit::attention_reference(qv.slice0(cu_q[b], nq),
                                  inferkit::DenseKv<inferkit::BFloat16>(kv.slice0(cu_k[b], nk), vv.slice0(cu_k[b], nk)),
                                  inferkit::Tensor3View<float>(ref.data() + cu_q[b] * hq * d, nq, hq, d), {});
  }
  CHECK(test::max_abs_diff(out, ref) < 2e-5);
}

TEST_CASE("varlen rejects inconsistent offsets", "[attention][varlen][errors]") {
  std::vector<float> q(4 * 2 * 8), k(6 * 1 * 8), out(q.size());
  inferkit::Tensor3View<const float> qv(q.data(), 4, 2, 8), kv(k.data(), 6, 1, 8);
  inferkit::Tensor3View<float> ov(out.data(), 4, 2, 8);
  const std::vector<std::int32_t> good_q{0, 4}, good_k{0, 6}, bad_q{0, 5}, dec_k{0, 7, 6}, short_k{0};
  CHECK_NOTHROW(inferkit::attention_varlen<float>(qv, good_q, kv, kv, good_k, ov));
  CHECK_THROWS_WITH(inferkit::attention_varlen<float>(qv, bad_q, kv, kv, good_k, ov),
                    Catch::Contains("cu_q.back() = 5"));
  CHECK_THROWS_WITH(inferkit::attention_varlen<float>(qv, std::vector<std::int32_t>{0, 2, 4}, kv, kv, dec_k, ov),
                    Catch::Contains("cu_k[2] = 6"));
  CHECK_THROWS_WITH(inferkit::attention_varlen<float>(qv, good_q, kv, kv, short_k, ov),
                    Catch::Contains("cu_k.size() = 1"));
}
