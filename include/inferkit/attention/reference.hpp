#pragma once
// Naive reference attention: materializes every score, accumulates in double, and follows the
// semantics of attention/options.hpp literally. O(Tq * Tk) memory; for tests and baselines only.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "inferkit/attention/alibi.hpp"
#include "inferkit/attention/detail/score_rule.hpp"
#include "inferkit/attention/gqa.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/options.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// q [Tq, Hq, d] against every token of kv; writes out [Tq, Hq, d] and, if lse has rows, the
/// natural-log log-sum-exp of each row's scores to lse [Tq, Hq].
template <KvSource S>
void attention_reference(Tensor3View<const float> q, const S& kv, Tensor3View<float> out, MatrixView<float> lse,
                         const AttentionOptions& opt = {}) {
  const Index tq = q.dim0(), hq = q.dim1(), d = q.dim2();
  const HeadGroups groups(hq, kv.num_kv_heads());
  detail::validate_options(opt, hq);
  require(d == kv.head_dim(), "q.dim2()", d, "must equal the KV head_dim (" + std::to_string(kv.head_dim()) + ")");
  if (!opt.query_positions.empty())  // read for every query row below
    require(static_cast<Index>(opt.query_positions.size()) == tq, "query_positions.size()", opt.query_positions.size(),
            "must equal q.dim0() (" + std::to_string(tq) + ")");
  const double scale = opt.scale ? double(*opt.scale) : 1.0 / std::sqrt(double(d));
  std::vector<float> slopes;
  if (!opt.alibi_slopes.empty())
    slopes.assign(opt.alibi_slopes.begin(), opt.alibi_slopes.end());
  else if (opt.alibi)
    slopes = alibi_slopes(hq);
  const detail::MaskRule rule{opt.causal, opt.window};
  const std::int64_t anchor = last_position(kv);
  if (opt.query_positions.empty())  // the same int32 rule as attention() (detail::ProblemBuilder)
    require(anchor - (tq - 1) >= std::numeric_limits<std::int32_t>::min(), "q.dim0()", tq,
            "places the first query (bottom-right aligned to the last key position " + std::to_string(anchor) +
                ") below the int32 position range");

  for (Index h = 0; h < hq; ++h) {
    const Index g = groups.kv_head(h);
    // Gather this KV head's keys, values and positions in double.
    std::vector<std::vector<double>> keys, values;
    std::vector<std::int64_t> kpos;
    std::vector<float> scratch(static_cast<std::size_t>(d));
    for (Index b = 0; b < kv.num_blocks(); ++b) {
      const auto blk = kv.block(g, b);
      for (Index j = 0; j < blk.num_tokens; ++j) {
        const RowsF32 kr = blk.keys.load_f32(j, 1, d, scratch.data(), d, true);
        keys.emplace_back(kr.data, kr.data + d);
        const RowsF32 vr = blk.values.load_f32(j, 1, d, scratch.data(), d, true);
        values.emplace_back(vr.data, vr.data + d);
        kpos.push_back(blk.positions[j]);
      }
    }
    for (Index i = 0; i < tq; ++i) {
      const std::int64_t p = opt.query_positions.empty() ? anchor - (tq - 1 - i) : opt.query_positions[i];
      std::vector<double> s(keys.size(), -std::numeric_limits<double>::infinity());
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < keys.size(); ++j) {
        if (!rule.visible(p, kpos[j])) continue;
        double dotp = 0;
        for (Index k = 0; k < d; ++k) dotp += double(q(i, h, k)) * keys[j][k];
        double sc = dotp * scale;
        if (opt.softcap > 0) sc = opt.softcap * std::tanh(sc / opt.softcap);
        if (!slopes.empty()) sc -= double(slopes[h]) * double(p - kpos[j]);
        s[j] = sc;
        m = std::max(m, sc);
      }
      // A sink logit joins the max and the denominator and carries no value (options.hpp).
      const double sink = opt.sink_logits.empty() ? -std::numeric_limits<double>::infinity() : opt.sink_logits[h];
      m = std::max(m, sink);
      std::vector<double> acc(static_cast<std::size_t>(d), 0.0);
      double z = sink > -std::numeric_limits<double>::infinity() ? std::exp(sink - m) : 0.0;
      if (m > -std::numeric_limits<double>::infinity()) {
        for (std::size_t j = 0; j < keys.size(); ++j) {
          if (s[j] == -std::numeric_limits<double>::infinity()) continue;
          const double w = std::exp(s[j] - m);
          z += w;
          for (Index k = 0; k < d; ++k) acc[k] += w * values[j][k];
        }
      }
      for (Index k = 0; k < d; ++k) out(i, h, k) = z > 0 ? static_cast<float>(acc[k] / z) : 0.0f;
      if (lse.rows() > 0)
        lse(i, h) = z > 0 ? static_cast<float>(m + std::log(z)) : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace inferkit
