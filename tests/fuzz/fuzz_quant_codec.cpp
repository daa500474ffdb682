// Fuzzes the KV quantization codecs through QuantizedKvCache: random specs (bits, symmetric,
// group size, axis, residual; invalid ones too), head_dim, heads, and appends of values that are
// often special (subnormals, binary16 limits, huge, infinities, NaN).
// Invariants, after every append (accepted or rejected):
//   - the cache holds exactly the accepted tokens, in order (a rejected append changes nothing);
//   - tail rows read back exactly; quantized rows within half their stored step (the codec's
//     contract, quant_codec.hpp), with a few float ulps of slack;
//   - attention over the cache (in-register dequantization) equals attention over the rows
//     read back (load_f32) within float rounding.

#include <algorithm>
#include <cmath>
#include <vector>

#include "fuzz_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/dense_kv.hpp"
#include "inferkit/kv/quantized_cache.hpp"

using inferkit::Index;
using inferkit::QuantAxis;
using inferkit::QuantSpec;

namespace {

QuantSpec any_spec(FuzzedDataProvider& in) {
  QuantSpec s;
  static constexpr int kBits[] = {2, 4, 8, 2, 4, 8, 3, 0};
  s.bits = kBits[in.ConsumeIntegralInRange<int>(0, 7)];
  s.symmetric = in.ConsumeBool();
  s.group_size = in.ConsumeIntegralInRange<Index>(-1, 40);
  s.axis = in.ConsumeBool() ? QuantAxis::kPerChannel : QuantAxis::kPerToken;
  s.residual = in.ConsumeIntegralInRange<Index>(-1, 6);
  return s;
}

// Checks every row of one stream against the accepted values (rows [t][c] of this head).
void check_stream(const inferkit::QuantStreamRows& rows, const QuantSpec& s,
                  const std::vector<std::vector<float>>& want, Index d) {
  const auto& st = *rows.stream;
  FUZZ_CHECK(st.quantized + st.tail_tokens == static_cast<Index>(want.size()));
  if (want.empty()) return;
  std::vector<float> got(want.size() * static_cast<std::size_t>(d));
  rows.load_f32(0, static_cast<Index>(want.size()), d, got.data(), d, false);
  for (std::size_t t = 0; t < want.size(); ++t)
    for (Index c = 0; c < d; ++c) {
      const float x = want[t][static_cast<std::size_t>(c)],
                  y = got[t * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)];
      if (static_cast<Index>(t) >= st.quantized) {
        FUZZ_CHECK(x == y || (std::isnan(x) && std::isnan(y)));
        continue;
      }
      const inferkit::QuantParams& p =
          s.axis == QuantAxis::kPerToken
              ? st.params[t * static_cast<std::size_t>(d / s.group_size) + static_cast<std::size_t>(c / s.group_size)]
              : st.params[(t / static_cast<std::size_t>(s.group_size)) * static_cast<std::size_t>(d) +
                          static_cast<std::size_t>(c)];
      const double step = inferkit::to_float(p.step), zero = p.zero(s);
      const double slack = 1e-6 * (std::abs(double(x)) + std::abs(zero) + step * s.levels()) + 1e-37;
      FUZZ_CHECK(std::isfinite(y));
      FUZZ_CHECK(std::abs(double(y) - double(x)) <= 0.5 * step + slack);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  inferkit::KvQuantConfig cfg{any_spec(in), any_spec(in)};
  if (in.ConsumeBool()) cfg.values = cfg.keys;
  const Index heads = in.ConsumeIntegralInRange<Index>(1, 2);
  const Index d = in.ConsumeIntegralInRange<Index>(0, 48);
  std::optional<inferkit::QuantizedKvCache> cache;
  if (!fuzz::ok([&] { cache.emplace(1, heads, d, cfg); })) return 0;

  // Accepted rows per head: keys[h][t], values[h][t].
  std::vector<std::vector<std::vector<float>>> keys(static_cast<std::size_t>(heads)), values(keys);
  const bool special = in.ConsumeBool();  // special values everywhere, or finite ones with rare specials
  while (in.remaining_bytes() > 0) {
    const Index n = in.ConsumeIntegralInRange<Index>(1, 12);
    std::vector<float> k(static_cast<std::size_t>(n * heads * d)), v(k.size());
    for (auto* buf : {&k, &v})
      for (float& x : *buf)
        x = special || in.ConsumeIntegralInRange<int>(0, 63) == 0 ? fuzz::any_float(in)
                                                                  : fuzz::finite_float(in, 100.0f);
    const bool accepted = fuzz::ok([&] { cache->append(0, {k.data(), n, heads, d}, {v.data(), n, heads, d}); });
    if (accepted)
      for (Index t = 0; t < n; ++t)
        for (Index h = 0; h < heads; ++h) {
          const std::size_t at = static_cast<std::size_t>((t * heads + h) * d);
          keys[static_cast<std::size_t>(h)].emplace_back(k.begin() + static_cast<std::ptrdiff_t>(at),
                                                         k.begin() + static_cast<std::ptrdiff_t>(at + d));
          values[static_cast<std::size_t>(h)].emplace_back(v.begin() + static_cast<std::ptrdiff_t>(at),
                                                           v.begin() + static_cast<std::ptrdiff_t>(at + d));
        }
    FUZZ_CHECK(cache->length(0) == static_cast<Index>(keys[0].size()));
    const auto src = cache->source(0);
    for (Index h = 0; h < heads; ++h) {
      const auto blk = src.block(h, 0);
      check_stream(blk.keys, cfg.keys, keys[static_cast<std::size_t>(h)], d);
      check_stream(blk.values, cfg.values, values[static_cast<std::size_t>(h)], d);
    }
  }

  // Attention over the cache equals attention over its rows read back (when values are tame).
  const Index tk = cache->length(0);
  if (tk == 0 || d == 0) return 0;
  std::vector<float> kr(static_cast<std::size_t>(tk * heads * d)), vr(kr.size()), row(static_cast<std::size_t>(tk * d));
  const auto src = cache->source(0);
  float amax = 0.0f;
  for (Index h = 0; h < heads; ++h) {
    const auto blk = src.block(h, 0);
    for (int kv = 0; kv < 2; ++kv) {
      (kv == 0 ? blk.keys : blk.values).load_f32(0, tk, d, row.data(), d, false);
      for (Index t = 0; t < tk; ++t)
        for (Index c = 0; c < d; ++c) {
          const float x = row[static_cast<std::size_t>(t * d + c)];
          (kv == 0 ? kr : vr)[static_cast<std::size_t>((t * heads + h) * d + c)] = x;
          amax = std::max(amax, std::abs(x));
        }
    }
  }
  if (!(amax <= 100.0f)) return 0;  // huge scores overflow either way; not what this compares
  const Index tq = std::min<Index>(tk, 3);
  std::vector<float> q(static_cast<std::size_t>(tq * heads * d));
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 7919) % 17) / 16.0f - 0.5f;
  std::vector<float> o1(q.size()), o2(q.size());
  inferkit::AttentionOptions opt;
  opt.scale = 0.01f;
  inferkit::attention(inferkit::Tensor3View<const float>(q.data(), tq, heads, d), src,
                      inferkit::Tensor3View<float>(o1.data(), tq, heads, d), {}, opt);
  const inferkit::DenseKv<float> dense(inferkit::Tensor3View<const float>(kr.data(), tk, heads, d),
                                       inferkit::Tensor3View<const float>(vr.data(), tk, heads, d));
  inferkit::attention(inferkit::Tensor3View<const float>(q.data(), tq, heads, d), dense,
                      inferkit::Tensor3View<float>(o2.data(), tq, heads, d), {}, opt);
  for (std::size_t i = 0; i < o1.size(); ++i) FUZZ_CHECK(std::abs(o1[i] - o2[i]) <= 1e-4f * (1.0f + amax));
  return 0;
}
