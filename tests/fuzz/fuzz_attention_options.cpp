// Fuzzes attention()'s argument and option validation with small random problems: shapes that
// may disagree (q / out / lse / KV heads / head_dim), every option (scale, causal, window,
// ALiBi with default or custom slopes, softcap, explicit query positions, KV split, batch-
// invariant mode, threads) with valid and invalid values, and KV at shifted or explicit
// positions (including the ends of the int32 range).
// Invariants: attention() and the fp64 reference accept and reject the same arguments; when
// they run, the output and LSE match the reference (fully masked rows: zeros and -inf) within
// 1e-4 relative plus what float scores can hold: a score's float error is a few ulp of
// sum |q_c k_c| * scale (at most 2 c after a soft-cap c) plus a few ulp of its ALiBi bias (large
// at distances of 2^24 or more), and a per-score error delta moves every softmax weight by at
// most a factor exp(+-2 delta).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/attention/alibi.hpp"
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
  const Index hkv = in.ConsumeIntegralInRange<Index>(1, 3),
              hq = maybe_wrong(in, hkv * in.ConsumeIntegralInRange<Index>(1, 3));
  const Index d = in.ConsumeIntegralInRange<Index>(1, 12), dq = maybe_wrong(in, d);
  if (hq <= 0 || dq <= 0) return 0;

  inferkit::AttentionOptions opt;
  if (in.ConsumeBool())
    opt.scale = in.ConsumeBool() ? fuzz::any_float(in) : in.ConsumeFloatingPointInRange<float>(0.01f, 2.0f);
  opt.causal = in.ConsumeBool();
  static constexpr Index kWindows[] = {0, 0, 1, 2, 3, 7, -1, Index{1} << 40};
  opt.window = kWindows[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kWindows) - 1)];
  opt.alibi = in.ConsumeBool();
  std::vector<float> slopes;
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    slopes.resize(static_cast<std::size_t>(maybe_wrong(in, hq)));
    for (float& s : slopes)
      s = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? fuzz::any_float(in)
                                                    : in.ConsumeFloatingPointInRange<float>(0.0f, 1.0f);
    opt.alibi_slopes = slopes;
  }
  if (in.ConsumeBool())
    opt.softcap = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? fuzz::any_float(in)
                                                            : in.ConsumeFloatingPointInRange<float>(0.5f, 50.0f);
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
  std::vector<float> out(static_cast<std::size_t>(oq * hq * dq), 99.0f),
      ref(static_cast<std::size_t>(tq * hq * dq), 99.0f);
  std::vector<float> lse(static_cast<std::size_t>(lse_rows * hq), 99.0f),
      ref_lse(static_cast<std::size_t>(tq * hq), 99.0f);
  const inferkit::Tensor3View<const float> qv(q.data(), tq, hq, dq);
  std::string why, ref_why;
  const bool ran = fuzz::ok(
      [&] {
        inferkit::attention(
            qv, *kv, inferkit::Tensor3View<float>(out.data(), oq, hq, dq),
            lse_rows > 0 ? inferkit::MatrixView<float>(lse.data(), lse_rows, hq) : inferkit::MatrixView<float>{}, opt);
      },
      &why);
  const bool shapes_right = oq == tq && (lse_rows == 0 || lse_rows == tq);
  const bool ref_ran =
      shapes_right && fuzz::ok(
                          [&] {
                            inferkit::attention_reference(qv, *kv, inferkit::Tensor3View<float>(ref.data(), tq, hq, dq),
                                                          inferkit::MatrixView<float>(ref_lse.data(), tq, hq), opt);
                          },
                          &ref_why);
  if (ran != ref_ran) std::fprintf(stderr, "attention: %s\nreference: %s\n", why.c_str(), ref_why.c_str());
  FUZZ_CHECK(ran == ref_ran);
  if (!ran) return 0;
  // Per (query row, head): delta bounds the float error of any of its scores.
  const double scale = opt.scale ? double(*opt.scale) : 1.0 / std::sqrt(double(dq));
  const std::vector<float> alibi = !slopes.empty() ? slopes
                                   : opt.alibi     ? inferkit::alibi_slopes(hq)
                                                   : std::vector<float>{};
  const auto key_pos = [&](Index j) {
    return explicit_kpos ? std::int64_t{kpos[static_cast<std::size_t>(j)]} : std::int64_t{first} + j;
  };
  const auto query_pos = [&](Index i) {
    return !qpos.empty() ? std::int64_t{qpos[static_cast<std::size_t>(i)]} : key_pos(tk - 1) - (tq - 1 - i);
  };
  double vmax = 0.0;
  for (float x : v) vmax = std::max(vmax, double(std::abs(x)));
  std::vector<double> delta(static_cast<std::size_t>(tq * hq), 0.0);
  for (Index i = 0; i < tq; ++i)
    for (Index h = 0; h < hq; ++h) {
      // A float dot product errs by a few ulp of sum |q_c k_c| (times the scale), which a
      // soft-cap (slope <= 1) passes on up to 2 c; the ALiBi bias adds a few ulp of itself.
      double worst = 0.0;
      for (Index j = 0; j < tk; ++j) {
        double qk_abs = 0.0;
        for (Index c = 0; c < d; ++c)
          qk_abs += std::abs(double(q[static_cast<std::size_t>((i * hq + h) * dq + c)]) *
                             double(k[static_cast<std::size_t>((j * hkv + h / (hq / hkv)) * d + c)]));
        double err = 16.0 * std::ldexp(qk_abs * scale, -24);
        if (opt.softcap > 0.0f) err = std::min(err, 2.0 * double(opt.softcap));
        if (!alibi.empty())
          err += 16.0 * std::ldexp(std::abs(double(alibi[static_cast<std::size_t>(h)])) *
                                       std::abs(double(query_pos(i) - key_pos(j))),
                                   -24);
        worst = std::max(worst, err);
      }
      delta[static_cast<std::size_t>(i * hq + h)] = worst;
    }
  // Scores (or the scaled query) beyond the float range overflow, as in any float kernel: the
  // result is unspecified there (options.hpp), so only acceptance is compared.
  double qmax = 0.0, kmax = 0.0, dmax = 0.0;  // dmax: the largest delta
  for (float x : q) qmax = std::max(qmax, double(std::abs(x)));
  for (float x : k) kmax = std::max(kmax, double(std::abs(x)));
  for (double x : delta) dmax = std::max(dmax, x);
  if (qmax * scale * std::max(1.0, kmax) * double(d) >= 1e37 || std::ldexp(dmax, 20) >= 1e37) return 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double dl = delta[i / static_cast<std::size_t>(dq)];
    const double tol = 1e-4 * (1.0 + std::abs(double(ref[i]))) + (vmax > 0.0 ? std::expm1(2.0 * dl) * vmax : 0.0);
    if (!(std::abs(double(out[i]) - double(ref[i])) <= tol))
      std::fprintf(stderr, "out[%zu] = %g, reference %g, tolerance %g\n", i, out[i], ref[i], tol);
    FUZZ_CHECK(std::abs(double(out[i]) - double(ref[i])) <= tol);
  }
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref_lse[i]))
      FUZZ_CHECK(lse[i] == ref_lse[i]);
    else
      FUZZ_CHECK(std::abs(double(lse[i]) - double(ref_lse[i])) <=
                 1e-4 * (1.0 + std::abs(double(ref_lse[i]))) + delta[i]);
  }
  return 0;
}
