#include "attention/attention_test_util.hpp"

TEST_CASE("attention rejects inconsistent shapes and bad options with named parameters", "[attention][errors]") {
  std::vector<float> q(2 * 4 * 8), k(3 * 2 * 8), out(q.size()), lse(8);
  inferkit::Tensor3View<const float> qv(q.data(), 2, 4, 8), kv3(k.data(), 3, 2, 8);
  inferkit::DenseKv<float> kv(kv3, kv3);
  inferkit::Tensor3View<float> ov(out.data(), 2, 4, 8);
  using Catch::Contains;

  CHECK_NOTHROW(inferkit::attention(qv, kv, ov));
  // Hq % Hkv != 0.
  std::vector<float> k3(3 * 3 * 8);
  inferkit::Tensor3View<const float> kv33(k3.data(), 3, 3, 8);
  CHECK_THROWS_WITH(inferkit::attention(qv, inferkit::DenseKv<float>(kv33, kv33), ov), Contains("num_q_heads = 4"));
  // head_dim mismatch.
  inferkit::Tensor3View<const float> q7(q.data(), 2, 4, 7);
  std::vector<float> o7(2 * 4 * 7);
  CHECK_THROWS_WITH(inferkit::attention(q7, kv, inferkit::Tensor3View<float>(o7.data(), 2, 4, 7)), Contains("q.dim2() = 7"));
  // Output shape.
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, inferkit::Tensor3View<float>(out.data(), 1, 4, 8)), Contains("out.dim0() = 1"));
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, inferkit::MatrixView<float>(lse.data(), 2, 3)), Contains("lse.cols() = 3"));
  // Keys and values disagree.
  std::vector<float> v4(4 * 2 * 8);
  CHECK_THROWS_WITH((inferkit::DenseKv<float>(kv3, inferkit::Tensor3View<const float>(v4.data(), 4, 2, 8))),
                    Contains("values.dim0() = 4"));
  // Options.
  inferkit::AttentionOptions opt;
  opt.scale = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Contains("scale = inf"));
  opt.scale = std::nanf("");
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Contains("scale = nan"));
  opt = {};
  opt.window = -1;
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Contains("window = -1"));
  opt = {};
  opt.softcap = -2.0f;
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Contains("softcap = -2"));
  opt = {};
  const std::vector<float> slopes(3, 0.5f);
  opt.alibi_slopes = slopes;
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Contains("alibi_slopes.size() = 3"));
  opt = {};
  const std::vector<std::int32_t> qpos{1};
  opt.query_positions = qpos;
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Contains("query_positions.size() = 1"));
  const std::vector<std::int32_t> kpos{0, 1};
  CHECK_THROWS_WITH((inferkit::DenseKv<float>(kv3, kv3, kpos)), Contains("positions.size() = 2"));
}
