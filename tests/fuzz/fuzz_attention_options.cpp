// Fuzzes attention()'s argument and option validation with small random problems: shapes that
// may disagree (q / out / lse / KV heads / head_dim), every option (scale, causal, window,
// ALiBi with default or custom slopes, softcap, explicit query positions, KV split, batch-
// invariant mode, threads) with valid and invalid values, and KV at shifted or explicit
// positions (including the ends of the int32 range).
// Invariants: attention() and the fp64 reference accept and reject the same arguments; when
// they run, the output and LSE match the reference (fully masked rows: zeros and -inf).

#include <cmath>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/dense_kv.hpp"
#include "inferkit/attention/reference.hpp"

using inferkit::Index;

namespace {

std::int32_t any_position(FuzzedDataProvider& in) {
  static constexpr std::int32_t kEdges[] = {0, 1, -1, 5, 100, 2147483647, -2147483647 - 1, 2147483600, -2147483600};
  return in.ConsumeBool() ? kEdges[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kEdges) - 1)]
                          : in.ConsumeIntegralInRange<std::int32_t>(-3, 40);
}

Index maybe_wrong(FuzzedDataProvider& in, Index right) {
  return in.ConsumeIntegralInRange<int>(0, 15) == 0 ? right + in.ConsumeIntegralInRange<Index>(-1, 1) : right;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const Index tq = in.ConsumeIntegralInRange<Index>(0, 6), tk = in.ConsumeIntegralInRange<Index>(0, 12);
  const Index hkv = in.ConsumeIntegralInRange<Index>(1, 3), hq = maybe_wrong(in, hkv * in.ConsumeIntegralInRange<Index>(1, 3));
  const Index d = in.ConsumeIntegralInRange<Index>(1, 12), dq = maybe_wrong(in, d);
  if (hq <= 0 || dq <= 0) return 0;

  inferkit::AttentionOptions opt;
  if (in.ConsumeBool()) opt.scale = in.ConsumeBool() ? fuzz::any_float(in) : in.ConsumeFloatingPointInRange<float>(0.01f, 2.0f);
  opt.causal = in.ConsumeBool();
  static constexpr Index kWindows[] = {0, 0, 1, 2, 3, 7, -1, Index{1} << 40};
  opt.window = kWindows[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kWindows) - 1)];
  opt.alibi = in.ConsumeBool();
  std::vector<float> slopes;
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    slopes.resize(static_cast<std::size_t>(maybe_wrong(in, hq)));
    for (float& s : slopes) s = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? fuzz::any_float(in) : in.ConsumeFloatingPointInRange<float>(0.0f, 1.0f);
    opt.alibi_slopes = slopes;
  }
  if (in.ConsumeBool()) opt.softcap = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? fuzz::any_float(in) : in.ConsumeFloatingPointInRange<float>(0.5f, 50.0f);
  std::vector<std::int32_t> qpos;
  if (in.ConsumeBool()) {
    qpos.resize(static_cast<std::size_t>(std::max<Index>(0, maybe_wrong(in, tq))));
    for (auto& p : qpos) p = any_position(in);
    opt.query_positions = qpos;
  }
  static constexpr Index kSplits[] = {0, 0, 1, 3, 64, 128, -1};
  opt.kv_split_tokens = kSplits[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kSplits) - 1)];
  opt.batch_invariant = in.ConsumeBool();
  opt.num_threads = in.ConsumeIntegralInRange<int>(-1, 2);

  // Moderate finite values: the comparison is about masks, positions and options.
  std::vector<float> q(static_cast<std::size_t>(tq * hq * dq)), k(static_cast<std::size_t>(tk * hkv * d)), v(k.size());
  for (auto* buf : {&q, &k, &v})
    for (float& x : *buf) x = static_cast<float>(in.ConsumeIntegralInRange<int>(-16, 16)) / 8.0f;
  std::vector<std::int32_t> kpos;
  const bool explicit_kpos = in.ConsumeBool();
  const std::int32_t first = any_position(in);
  if (explicit_kpos) {
    kpos.resize(static_cast<std::size_t>(tk));
    for (auto& p : kpos) p = any_position(in);
  }
  std::optional<inferkit::DenseKv<float>> kv;
  const inferkit::Tensor3View<const float> kview(k.data(), tk, hkv, d), vview(v.data(), tk, hkv, d);
  if (!fuzz::ok([&] { explicit_kpos ? kv.emplace(kview, vview, kpos) : kv.emplace(kview, vview, first); })) return 0;

  const Index oq = maybe_wrong(in, tq), lse_rows = in.ConsumeBool() ? maybe_wrong(in, tq) : 0;
  if (oq < 0 || lse_rows < 0) return 0;
  std::vector<float> out(static_cast<std::size_t>(oq * hq * dq), 99.0f), ref(static_cast<std::size_t>(tq * hq * dq), 99.0f);
  std::vector<float> lse(static_cast<std::size_t>(lse_rows * hq), 99.0f), ref_lse(static_cast<std::size_t>(tq * hq), 99.0f);
  const inferkit::Tensor3View<const float> qv(q.data(), tq, hq, dq);
  std::string why, ref_why;
  const bool ran = fuzz::ok([&] {
    inferkit::attention(qv, *kv, inferkit::Tensor3View<float>(out.data(), oq, hq, dq),
                        lse_rows > 0 ? inferkit::MatrixView<float>(lse.data(), lse_rows, hq) : inferkit::MatrixView<float>{}, opt);
  }, &why);
  const bool shapes_right = oq == tq && (lse_rows == 0 || lse_rows == tq);
  const bool ref_ran = shapes_right && fuzz::ok([&] {
    inferkit::attention_reference(qv, *kv, inferkit::Tensor3View<float>(ref.data(), tq, hq, dq),
                                  inferkit::MatrixView<float>(ref_lse.data(), tq, hq), opt);
  }, &ref_why);
  if (ran != ref_ran) std::fprintf(stderr, "attention: %s\nreference: %s\n", why.c_str(), ref_why.c_str());
  FUZZ_CHECK(ran == ref_ran);
  if (!ran) return 0;
  for (std::size_t i = 0; i < out.size(); ++i) FUZZ_CHECK(std::abs(out[i] - ref[i]) <= 1e-4f * (1.0f + std::abs(ref[i])));
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) FUZZ_CHECK(lse[i] == ref_lse[i]);
    else FUZZ_CHECK(std::abs(lse[i] - ref_lse[i]) <= 1e-4f * (1.0f + std::abs(ref_lse[i])));
  }
  return 0;
}
