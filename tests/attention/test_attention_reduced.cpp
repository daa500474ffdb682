// AttentionArithmetic::kReduced against fp64 references on the dequantized cache, with the error
// bounds docs/design.md states ("Reduced-precision decode arithmetic"):
//   q.k: the query rounded as specified (int8 per key group: sq = max|q_g| / 127 in fp32,
//        code = round-half-even(q / sq); bf16: RNE). With q^ in place of q the fp64 reference
//        must agree to float precision plus the p.v bound; against the unrounded query the score
//        error is |(q - q^) . k_c| <= eps_c (sum over groups of sq / 2 * |k_g|_1, or 2^-8 |q||k|
//        for bf16), so o moves by at most (e^{2 eps} - 1) sum_c p_c |v_c - o| (softmax weights
//        change by a factor within e^{+-2 eps}).
//   p.v: 8- / 4-bit values: each w = p * step rounded to 15 bits with sw = max_tile p * max_tile
//        step / 32767, so |o' - o| <= sum_c code_c max_win(c) p / 65534 * max_win(c) step (win:
//        keys within 63 of c, a superset of c's 64-key tile; code = (v - zero) / step);
//        bf16 values: p rounded to bf16, |o' - o| <= 2^-8 sum_c p_c |v_c|.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/kv/dense_cache.hpp"
#include "inferkit/kv/quantized_cache.hpp"

using inferkit::Index;

namespace {

struct Problem {
  Index tq, tk, hq, hkv, d;
  std::vector<float> q, kd, vd;     // query; dequantized keys / values [t][h][d]
  std::vector<float> vstep, vzero;  // per-token value params [h][t][group], when quantized
  Index vgroup = 0;
  int vbits = 0;         // 8 / 4: the integer p.v bound applies; 16: bf16 p
  Index vquantized = 0;  // tokens of each head whose values are quantized
};

// Output of one query row (t, h) in fp64, with the probabilities, for a query row qr (scaled).
void reference_row(const Problem& P, Index t, Index h, const std::vector<double>& qr, std::vector<double>& p,
                   std::vector<double>& o) {
  const Index g = h / (P.hq / P.hkv), visible = P.tk - P.tq + t + 1;
  p.assign(static_cast<std::size_t>(visible), 0.0);
  double mx = -INFINITY;
  for (Index c = 0; c < visible; ++c) {
    double s = 0;
    for (Index i = 0; i < P.d; ++i) s += qr[i] * P.kd[(c * P.hkv + g) * P.d + i];
    p[c] = s;
    mx = std::max(mx, s);
  }
  double z = 0;
  for (auto& x : p) z += (x = std::exp(x - mx));
  for (auto& x : p) x /= z;
  o.assign(static_cast<std::size_t>(P.d), 0.0);
  for (Index c = 0; c < visible; ++c)
    for (Index j = 0; j < P.d; ++j) o[j] += p[c] * P.vd[(c * P.hkv + g) * P.d + j];
}

// The query rounding as docs/design.md specifies it (fp32 scale and division, RNE).
std::vector<double> rounded_query(const float* q, Index d, float scale, int kind, Index group,
                                  std::vector<double>& err) {
  std::vector<double> out(static_cast<std::size_t>(d));
  err.assign(static_cast<std::size_t>(d), 0.0);
  for (Index i = 0; i < d; ++i) out[i] = q[i] * scale;
  if (kind == 16) {
    for (Index i = 0; i < d; ++i) {
      const float x = q[i] * scale;
      out[i] = inferkit::to_float(inferkit::to_bfloat16(x));
      err[i] = std::ldexp(std::abs(x), -8);
    }
  } else if (kind == 8) {
    for (Index g0 = 0; g0 < d; g0 += group) {
      float mx = 0;
      for (Index i = g0; i < g0 + group; ++i) mx = std::max(mx, std::abs(q[i] * scale));
      const float s = mx / 127.0f;
      for (Index i = g0; i < g0 + group; ++i) {
        const float x = q[i] * scale;
        out[i] = s > 0 ? double(s) * double(std::nearbyint(x / s)) : 0.0;
        err[i] = s / 2.0;
      }
    }
  }
  return out;
}

// Checks a reduced-arithmetic output against the bounds; key_kind 8 / 16 / 0 (int8 query, bf16
// query, exact query), key_group for the int8 rounding.
void check_bounds(const Problem& P, const std::vector<float>& got, int key_kind, Index key_group) {
  const float scale = 1.0f / std::sqrt(float(P.d));
  double worst_spec = 0, worst_stated = 0, max_err = 0;
  for (Index t = 0; t < P.tq; ++t)
    for (Index h = 0; h < P.hq; ++h) {
      const Index g = h / (P.hq / P.hkv);
      const float* qrow = P.q.data() + (t * P.hq + h) * P.d;
      std::vector<double> qerr;
      const auto qhat = rounded_query(qrow, P.d, scale, key_kind, key_group, qerr);
      std::vector<double> qexact(static_cast<std::size_t>(P.d));
      for (Index i = 0; i < P.d; ++i) qexact[i] = double(qrow[i] * scale);
      std::vector<double> p_hat, o_hat, p, o;
      reference_row(P, t, h, qhat, p_hat, o_hat);
      reference_row(P, t, h, qexact, p, o);
      const Index visible = static_cast<Index>(p.size());
      // eps: the largest score error the query rounding can cause.
      double eps = 0;
      for (Index c = 0; c < visible; ++c) {
        double e = 0;
        for (Index i = 0; i < P.d; ++i) e += qerr[i] * std::abs(P.kd[(c * P.hkv + g) * P.d + i]);
        eps = std::max(eps, e);
      }
      const double grow = std::exp(2 * eps);
      double vmax = 0;
      for (Index c = 0; c < visible; ++c)
        for (Index j = 0; j < P.d; ++j) vmax = std::max(vmax, double(std::abs(P.vd[(c * P.hkv + g) * P.d + j])));
      // Window maxima of p and of each group's step (keys within 63 of c), once per row.
      const Index groups = P.vgroup > 0 ? P.d / P.vgroup : 1;
      std::vector<double> pw_hat(static_cast<std::size_t>(visible)), pw(pw_hat.size()),
          sw(static_cast<std::size_t>(visible * groups), 0.0);
      for (Index c = 0; c < visible; ++c)
        for (Index c2 = std::max<Index>(0, c - 63); c2 < std::min(visible, c + 64); ++c2) {
          pw_hat[c] = std::max(pw_hat[c], p_hat[c2]);
          pw[c] = std::max(pw[c], p[c2]);
          if ((P.vbits == 8 || P.vbits == 4) && c2 < P.vquantized)
            for (Index grp = 0; grp < groups; ++grp)
              sw[c * groups + grp] = std::max(sw[c * groups + grp], double(P.vstep[(g * P.tk + c2) * groups + grp]));
        }
      for (Index j = 0; j < P.d; ++j) {
        // p.v bound with the probabilities of the rounded-query problem (and, for the stated
        // bound, the unrounded one grown by e^{2 eps}).
        auto pv_bound = [&](const std::vector<double>& pp, const std::vector<double>& pwin, double factor) {
          double b = 0;
          for (Index c = 0; c < visible; ++c) {
            const double vcj = P.vd[(c * P.hkv + g) * P.d + j];
            if (P.vbits == 16) {
              b += std::ldexp(pp[c] * factor * std::abs(vcj), -8);
            } else if (P.vbits == 8 || P.vbits == 4) {
              if (c >= P.vquantized) continue;
              const Index grp = j / P.vgroup;
              const double step = P.vstep[(g * P.tk + c) * groups + grp], zero = P.vzero[(g * P.tk + c) * groups + grp];
              const double code = std::abs((vcj - zero) / step);
              b += code * pwin[c] * factor * sw[c * groups + grp] / 65534.0;
            }
          }
          return b;
        };
        const Index oi = (t * P.hq + h) * P.d + j;
        const double slack = 3e-5 * (1 + vmax);
        const double spec = pv_bound(p_hat, pw_hat, 1.0) + slack;
        double spread = 0;
        for (Index c = 0; c < visible; ++c) spread += p[c] * std::abs(P.vd[(c * P.hkv + g) * P.d + j] - o[j]);
        const double stated = (grow - 1) * spread + pv_bound(p, pw, grow) + slack;
        const double e_spec = std::abs(got[oi] - o_hat[j]), e_stated = std::abs(got[oi] - o[j]);
        worst_spec = std::max(worst_spec, e_spec / spec);
        worst_stated = std::max(worst_stated, e_stated / stated);
        max_err = std::max(max_err, e_stated);
      }
    }
  INFO("error / bound: " << worst_spec << " (rounded-query reference), " << worst_stated
                         << " (unrounded query); max |error| " << max_err);
  CHECK(worst_spec <= 1.0);
  CHECK(worst_stated <= 1.0);
}

void read_value_params(const inferkit::QuantizedKvCache& c, Problem& P) {
  const auto src = c.source(0);
  const auto& spec = c.config().values;
  P.vbits = spec.axis == inferkit::QuantAxis::kPerToken && spec.bits >= 4 ? spec.bits : 0;
  P.vgroup = spec.group_size;
  const Index groups = P.d / P.vgroup;
  P.vstep.assign(static_cast<std::size_t>(P.hkv * P.tk * groups), 0.0f);
  P.vzero = P.vstep;
  for (Index h = 0; h < P.hkv; ++h) {
    const auto view = src.block(h, 0).values.quantized_view();
    P.vquantized = view.tokens;
    for (Index t = 0; t < view.tokens; ++t)
      for (Index g = 0; g < groups; ++g) {
        std::uint16_t s = 0, m = 0;
        std::memcpy(&s, view.params + 4 * (t * groups + g), 2);
        std::memcpy(&m, view.params + 4 * (t * groups + g) + 2, 2);
        const float step = inferkit::to_float(inferkit::Float16{s});
        P.vstep[(h * P.tk + t) * groups + g] = step;
        P.vzero[(h * P.tk + t) * groups + g] =
            spec.symmetric ? -float(1 << (spec.bits - 1)) * step : inferkit::to_float(inferkit::Float16{m});
      }
  }
}

// Dequantized keys / values of layer 0 through the block view.
void dequantize(const inferkit::QuantizedKvCache& c, Problem& P) {
  const auto src = c.source(0);
  P.kd.assign(static_cast<std::size_t>(P.tk * P.hkv * P.d), 0.0f);
  P.vd = P.kd;
  std::vector<float> scratch(static_cast<std::size_t>(P.tk * P.d));
  for (Index h = 0; h < P.hkv; ++h) {
    const auto blk = src.block(h, 0);
    for (int side = 0; side < 2; ++side) {
      const auto r = side == 0 ? blk.keys.load_f32(0, P.tk, P.d, scratch.data(), P.d, false)
                               : blk.values.load_f32(0, P.tk, P.d, scratch.data(), P.d, false);
      auto& dst = side == 0 ? P.kd : P.vd;
      for (Index t = 0; t < P.tk; ++t) std::copy_n(r.data + t * r.stride, P.d, dst.begin() + (t * P.hkv + h) * P.d);
    }
  }
}

template <class Source>
std::vector<float> run(const Problem& P, const Source& src, inferkit::AttentionArithmetic a, int threads) {
  std::vector<float> out(static_cast<std::size_t>(P.tq * P.hq * P.d));
  inferkit::AttentionOptions opt;
  opt.arithmetic = a;
  opt.num_threads = threads;
  inferkit::attention(inferkit::Tensor3View<const float>(P.q.data(), P.tq, P.hq, P.d), src,
                      {out.data(), P.tq, P.hq, P.d}, {}, opt);
  return out;
}

template <class Source>
void check_source(const Problem& P, const Source& src, int key_kind, Index key_group, bool rounds) {
  const auto fast = run(P, src, inferkit::AttentionArithmetic::kReduced, 2);
  check_bounds(P, fast, key_kind, key_group);
  CHECK(fast == run(P, src, inferkit::AttentionArithmetic::kReduced, 1));  // thread count independent
  const auto exact = run(P, src, inferkit::AttentionArithmetic::kExact, 2);
  if (rounds)
    CHECK(test::max_abs_diff(fast, exact) > 0);  // the mode did round something
  else
    CHECK(fast == exact);
}

}  // namespace

TEST_CASE("reduced arithmetic over quantized caches stays within its stated bounds", "[attention][reduced]") {
  using inferkit::AttentionArithmetic;
  struct Shape {
    Index tq, tk, hq, hkv, d;
  };
  // d 128: the VNNI kernels; d 64: integer p.v, 4-bit keys through the float kernel; d 8 (the
  // stories260K head): the rounded query through the float kernel. Tk not a multiple of 64.
  const Shape shapes[] = {{1, 530, 8, 2, 128}, {3, 300, 8, 2, 64}, {2, 200, 8, 2, 8}, {1, 300, 32, 2, 128}};
  for (const auto& sh : shapes)
    for (const char* preset : {"int8", "int4", "kivi4", "kivi2"}) {
      INFO(preset << " Tq=" << sh.tq << " Tk=" << sh.tk << " Hq=" << sh.hq << " d=" << sh.d);
      Problem P{sh.tq, sh.tk, sh.hq, sh.hkv, sh.d, test::random_normal(sh.tq * sh.hq * sh.d, 31), {}, {}, {}, {}};
      auto k = test::random_normal(sh.tk * sh.hkv * sh.d, 32), v = test::random_normal(sh.tk * sh.hkv * sh.d, 33);
      for (Index t = 0; t < sh.tk; ++t) k[(t * sh.hkv) * sh.d + 3 % sh.d] *= 15.0f;  // an outlier key channel
      const auto cfg = inferkit::kv_quant_preset(preset, sh.d);
      inferkit::QuantizedKvCache cache(1, sh.hkv, sh.d, cfg);
      cache.append(0, {k.data(), sh.tk, sh.hkv, sh.d}, {v.data(), sh.tk, sh.hkv, sh.d});
      dequantize(cache, P);
      read_value_params(cache, P);
      const bool per_token_keys = cfg.keys.axis == inferkit::QuantAxis::kPerToken;
      const bool integer_pv = inferkit::detail::kReducedVnni && (P.vbits == 8 || P.vbits == 4) && sh.d % 64 == 0 &&
                              cfg.values.group_size % 32 == 0;
      check_source(P, cache.source(0), per_token_keys ? 8 : 0, cfg.keys.group_size, per_token_keys || integer_pv);
    }
}

TEST_CASE("reduced arithmetic over bf16 caches rounds q and p to bf16; f32 caches stay exact", "[attention][reduced]") {
  for (Index d : {128, 8}) {
    INFO("d=" << d);
    const Index tq = 2, tk = 333, hq = 8, hkv = 2;
    Problem P{tq, tk, hq, hkv, d, test::random_normal(tq * hq * d, 41), {}, {}, {}, {}};
    const auto k = test::random_normal(tk * hkv * d, 42), v = test::random_normal(tk * hkv * d, 43);
    inferkit::DenseKvCache<inferkit::BFloat16> bf(1, hkv, d, tk, inferkit::CacheGrowth::kFixed);
    bf.append(0, {k.data(), tk, hkv, d}, {v.data(), tk, hkv, d});
    const auto kb = test::to_storage<inferkit::BFloat16>(k), vb = test::to_storage<inferkit::BFloat16>(v);
    P.kd.resize(k.size());
    P.vd.resize(v.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      P.kd[i] = inferkit::to_float(kb[i]);
      P.vd[i] = inferkit::to_float(vb[i]);
    }
    P.vbits = 16;
    check_source(P, bf.source(0), 16, 0, true);
    inferkit::DenseKvCache<float> f32(1, hkv, d, tk, inferkit::CacheGrowth::kFixed);
    f32.append(0, {k.data(), tk, hkv, d}, {v.data(), tk, hkv, d});
    P.kd = k;
    P.vd = v;
    P.vbits = 0;
    check_source(P, f32.source(0), 0, 0, false);
  }
}

TEST_CASE("the arithmetic option is validated by name", "[attention][reduced][errors]") {
  const Index d = 8;
  std::vector<float> q(d), k(d), v(d), out(d);
  inferkit::AttentionOptions opt;
  opt.arithmetic = static_cast<inferkit::AttentionArithmetic>(7);
  CHECK_THROWS_WITH(inferkit::attention(inferkit::Tensor3View<const float>(q.data(), 1, 1, d),
                                        inferkit::DenseKv<float>({k.data(), 1, 1, d}, {v.data(), 1, 1, d}),
                                        {out.data(), 1, 1, d}, {}, opt),
                    Catch::Contains("arithmetic"));
  CHECK(std::string(inferkit::arithmetic_name(inferkit::AttentionArithmetic::kReduced)) == "reduced");
}
