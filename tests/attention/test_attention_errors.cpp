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
  CHECK_THROWS_WITH(inferkit::attention(q7, kv, inferkit::Tensor3View<float>(o7.data(), 2, 4, 7)),
                    Contains("q.dim2() = 7"));
  // Output shape.
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, inferkit::Tensor3View<float>(out.data(), 1, 4, 8)),
                    Contains("out.dim0() = 1"));
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, inferkit::MatrixView<float>(lse.data(), 2, 3)),
                    Contains("lse.cols() = 3"));
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
  opt.softcap = 1e-40f;  // 1 / softcap would overflow
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Contains("softcap = 9.99994"));
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

// Regression from tests/fuzz/fuzz_attention_options: the reference read query_positions[i] for
// every query row without checking its size (past the end when shorter).
TEST_CASE("the reference rejects query positions that do not match the queries, as attention() does",
          "[attention][errors]") {
  std::vector<float> q(2 * 2 * 4, 0.5f), k(3 * 1 * 4, 0.25f), out(q.size());
  const inferkit::Tensor3View<const float> qv(q.data(), 2, 2, 4), kv3(k.data(), 3, 1, 4);
  const inferkit::DenseKv<float> kv(kv3, kv3);
  const std::vector<std::int32_t> one{2};
  inferkit::AttentionOptions opt;
  opt.query_positions = one;
  const inferkit::Tensor3View<float> ov(out.data(), 2, 2, 4);
  CHECK_THROWS_WITH(inferkit::attention(qv, kv, ov, {}, opt), Catch::Contains("query_positions.size() = 1"));
  CHECK_THROWS_WITH(inferkit::attention_reference(qv, kv, ov, {}, opt), Catch::Contains("query_positions.size() = 1"));
}

// Regression from tests/fuzz/fuzz_attention_options: positions are int32, and KV starting near
// the top of the range (or queries aligned below its bottom) overflowed (undefined behavior)
// instead of being rejected.
TEST_CASE("positions that leave the int32 range are rejected", "[attention][errors]") {
  std::vector<float> q(3 * 2 * 4, 0.5f), k(4 * 1 * 4, 0.25f), out(q.size());
  const inferkit::Tensor3View<const float> qv(q.data(), 3, 2, 4), kv4(k.data(), 4, 1, 4);
  const inferkit::Tensor3View<float> ov(out.data(), 3, 2, 4);
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max(),
                         kMin = std::numeric_limits<std::int32_t>::min();
  CHECK_THROWS_WITH((inferkit::DenseKv<float>(kv4, kv4, kMax - 2)), Catch::Contains("first_position = 2147483645"));
  CHECK_NOTHROW(inferkit::attention(qv, inferkit::DenseKv<float>(kv4, kv4, kMax - 3), ov));
  // Keys at kMin .. kMin + 3: three bottom-right aligned queries start at kMin + 1, fine; with
  // keys at explicit positions ending at kMin + 1 they would start at kMin - 1.
  CHECK_NOTHROW(inferkit::attention(qv, inferkit::DenseKv<float>(kv4, kv4, kMin), ov));
  const std::vector<std::int32_t> low{kMin + 3, kMin + 2, kMin, kMin + 1};
  const inferkit::DenseKv<float> kv_low(kv4, kv4, low);
  CHECK_THROWS_WITH(inferkit::attention(qv, kv_low, ov), Catch::Contains("below the int32 position range"));
  CHECK_THROWS_WITH(inferkit::attention_reference(qv, kv_low, ov, {}),
                    Catch::Contains("below the int32 position range"));
}
