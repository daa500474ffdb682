#pragma once
// Helpers for MLA tests: a random problem (queries, latents, up-projections) and the
// materialized fp64 reference (per head K_h = [W_UK_h c; k_pe], V_h = W_UV_h c, then plain
// softmax attention, causal bottom-right aligned, optional sink logit, in double).

#include <cmath>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/attention/mla.hpp"

namespace test {

using inferkit::MlaShape;

struct MlaProblem {
  MlaShape s;
  Index tq, tk;
  std::vector<float> q, c, kpe, wuk, wuv;  // q [tq][H][nope+rope], c [tk][rank], kpe [tk][rope], w [H][*][rank]

  MlaProblem(const MlaShape& shape, Index queries, Index keys, std::uint32_t seed) : s(shape), tq(queries), tk(keys) {
    q = test::random_normal(static_cast<std::size_t>(tq * s.num_heads * s.query_dim()), seed);
    c = test::random_normal(static_cast<std::size_t>(tk * s.kv_lora_rank), seed + 1);
    kpe = test::random_normal(static_cast<std::size_t>(tk * s.qk_rope_dim), seed + 2);
    // Scaled so that k_nope = W_UK c and v = W_UV c have unit variance.
    const float w = 1.0f / std::sqrt(static_cast<float>(s.kv_lora_rank));
    wuk = test::random_normal(static_cast<std::size_t>(s.num_heads * s.qk_nope_dim * s.kv_lora_rank), seed + 3, w);
    wuv = test::random_normal(static_cast<std::size_t>(s.num_heads * s.v_head_dim * s.kv_lora_rank), seed + 4, w);
  }
  inferkit::MlaWeights weights() const {
    return {{wuk.data(), s.num_heads, s.qk_nope_dim, s.kv_lora_rank},
            {wuv.data(), s.num_heads, s.v_head_dim, s.kv_lora_rank}};
  }
  inferkit::Tensor3View<const float> qview() const { return {q.data(), tq, s.num_heads, s.query_dim()}; }
};

// The latent rows a source holds, read back as floats [tk][latent_dim].
template <class Source>
std::vector<float> stored_rows(const Source& src, Index L) {
  std::vector<float> rows(static_cast<std::size_t>(src.num_tokens() * L)), scratch(static_cast<std::size_t>(L));
  Index j = 0;
  for (Index b = 0; b < src.num_blocks(); ++b) {
    const auto blk = src.block(0, b);
    for (Index i = 0; i < blk.num_tokens; ++i, ++j) {
      const inferkit::RowsF32 r = blk.keys.load_f32(i, 1, L, scratch.data(), L, true);
      std::copy_n(r.data, L, rows.data() + j * L);
    }
  }
  return rows;
}

// Materialized fp64 reference over latent rows [tk][rank + rope]: out [tq][H][v], lse [tq][H].
inline void mla_reference(const MlaProblem& P, const std::vector<float>& rows, double scale, bool causal,
                          const std::vector<float>& sinks, std::vector<double>& out, std::vector<double>& lse) {
  const MlaShape& s = P.s;
  const Index H = s.num_heads, R = s.kv_lora_rank, L = s.latent_dim(), nope = s.qk_nope_dim, dv = s.v_head_dim;
  out.assign(static_cast<std::size_t>(P.tq * H * dv), 0.0);
  lse.assign(static_cast<std::size_t>(P.tq * H), 0.0);
  for (Index h = 0; h < H; ++h) {
    // K_h [tk][nope + rope] and V_h [tk][v], materialized in double.
    std::vector<double> K(static_cast<std::size_t>(P.tk * s.query_dim())), V(static_cast<std::size_t>(P.tk * dv));
    for (Index j = 0; j < P.tk; ++j) {
      const float* cj = rows.data() + j * L;
      for (Index i = 0; i < nope; ++i) {
        double a = 0;
        for (Index r = 0; r < R; ++r) a += double(P.wuk[(h * nope + i) * R + r]) * cj[r];
        K[j * s.query_dim() + i] = a;
      }
      for (Index i = 0; i < s.qk_rope_dim; ++i) K[j * s.query_dim() + nope + i] = cj[R + i];
      for (Index i = 0; i < dv; ++i) {
        double a = 0;
        for (Index r = 0; r < R; ++r) a += double(P.wuv[(h * dv + i) * R + r]) * cj[r];
        V[j * dv + i] = a;
      }
    }
    for (Index t = 0; t < P.tq; ++t) {
      const Index visible = causal ? P.tk - P.tq + t + 1 : P.tk;
      const float* qt = P.q.data() + (t * H + h) * s.query_dim();
      std::vector<double> sc(static_cast<std::size_t>(std::max<Index>(visible, 0)));
      double m = sinks.empty() ? -INFINITY : double(sinks[h]);
      for (Index j = 0; j < visible; ++j) {
        double a = 0;
        for (Index i = 0; i < s.query_dim(); ++i) a += double(qt[i]) * K[j * s.query_dim() + i];
        sc[j] = a * scale;
        m = std::max(m, sc[j]);
      }
      double z = sinks.empty() ? 0.0 : std::exp(double(sinks[h]) - m);
      double* o = out.data() + (t * H + h) * dv;
      for (Index j = 0; j < visible; ++j) {
        const double w = std::exp(sc[j] - m);
        z += w;
        for (Index i = 0; i < dv; ++i) o[i] += w * V[j * dv + i];
      }
      for (Index i = 0; i < dv; ++i) o[i] = z > 0 ? o[i] / z : 0.0;
      lse[t * H + h] = z > 0 ? m + std::log(z) : -INFINITY;
    }
  }
}

struct Errors {
  double rel_rms = 0, max_abs = 0, lse_max = 0;
};

inline Errors compare(const std::vector<float>& got, const std::vector<float>& got_lse, const std::vector<double>& ref,
                      const std::vector<double>& ref_lse) {
  Errors e;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
  }
  e.rel_rms = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  for (std::size_t i = 0; i < ref_lse.size(); ++i) e.lse_max = std::max(e.lse_max, std::abs(got_lse[i] - ref_lse[i]));
  return e;
}

}  // namespace test
