#pragma once
// Prefill / chunk attention for one (KV head, query tile) unit: FlashAttention-2 (Dao 2023) with
// the tile's query rows (query tokens x the group's query heads) in SIMD lanes. Q^T is packed
// once per unit; for each key tile S^T = K Q^T, the online-softmax statistics update lane-wise,
// and O^T = O^T diag(alpha) + V^T P^T. K and V are read once per group of query heads; memory is
// O(tile), never O(Tq * Tk). Key tiles sit at fixed token indices (multiples of kPrefillKeyTile,
// key_tiles.hpp), gathered across blocks when pages are smaller.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "inferkit/attention/detail/key_tiles.hpp"
#include "inferkit/attention/detail/lanes_gemm.hpp"
#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/threading.hpp"
#include "inferkit/core/simd.hpp"

namespace inferkit::detail {

inline constexpr Index kPrefillKeyTile = 64;     // keys per tile
inline constexpr Index kPrefillTargetRows = 64;  // query rows (tokens x group heads) per unit

/// Query tokens per prefill unit for a group size.
inline Index prefill_query_tokens(Index group) { return std::max<Index>(1, kPrefillTargetRows / group); }

struct PrefillScratch {
  AlignedBuffer<float> qt, st, ot, kbuf, vbuf;
  AlignedBuffer<float> m, l, alpha, dq, slope, relk;
  AlignedBuffer<std::int32_t> kpos;  // positions of a tile gathered across blocks
};

template <KvSource S>
void prefill_unit(const SequenceProblem& p, const S& kv, Index g, Index t0, Index t1, PrefillScratch& ws) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  constexpr Index Bc = kPrefillKeyTile;
  const float neg_inf = kNegInf;
  const Index d = p.head_dim(), G = p.group, R = (t1 - t0) * G;
  const Index Rp = ceil_div(R, W) * W;  // rows in lanes: each lane's arithmetic is its own

  ws.qt.resize(static_cast<std::size_t>(d * Rp));
  ws.st.resize(static_cast<std::size_t>(Bc * Rp));
  ws.ot.resize(static_cast<std::size_t>(d * Rp));
  ws.kbuf.resize(static_cast<std::size_t>(Bc * d));
  ws.vbuf.resize(static_cast<std::size_t>(Bc * d));
  for (auto* b : {&ws.m, &ws.l, &ws.alpha, &ws.dq, &ws.slope}) b->resize(static_cast<std::size_t>(Rp));
  ws.relk.resize(static_cast<std::size_t>(Bc));
  ws.kpos.resize(static_cast<std::size_t>(Bc));
  float* qt = ws.qt.data();
  float* st = ws.st.data();
  float* ot = ws.ot.data();

  // Pack Q^T (scaled); padding rows are zero and are never written out.
  for (Index r = 0; r < Rp; ++r) {
    if (r < R) {
      const float* qrow = p.q.ptr(t0 + r / G, g * G + r % G);
      for (Index k = 0; k < d; ++k) qt[k * Rp + r] = qrow[k] * p.scale;
    } else {
      for (Index k = 0; k < d; ++k) qt[k * Rp + r] = 0.0f;
    }
    ws.m[r] = neg_inf;
    ws.l[r] = 0.0f;
    ws.slope[r] = (p.slopes && r < R) ? p.slopes[g * G + r % G] : 0.0f;
  }
  std::fill(ot, ot + d * Rp, 0.0f);
  std::int64_t q_lo = 0, q_hi = 0;
  position_range(p.q_pos.offset(t0), t1 - t0, q_lo, q_hi);

  const bool softcap = p.softcap > 0.0f;
  const VecF cap = simd::broadcast(p.softcap), inv_cap = simd::broadcast(softcap ? 1.0f / p.softcap : 0.0f);
  const VecF vneg_inf = simd::broadcast(neg_inf), vzero = simd::broadcast(0.0f);
  const VecF vwindow = simd::broadcast(static_cast<float>(p.mask.window));

  KeyTileWalker<S> tiles(kv, g, 0, kv.num_tokens(), Bc);
  while (tiles.next()) {
    {
      const Index nc = tiles.count();
      const TokenPositions kp = tiles.positions(ws.kpos.data());
      std::int64_t k_lo = 0, k_hi = 0;
      position_range(kp, nc, k_lo, k_hi);
      const TileVisibility vis = p.mask.classify(q_lo, q_hi, k_lo, k_hi);
      if (vis == TileVisibility::kNone) continue;
      const bool partial = vis == TileVisibility::kPartial;
      const bool positional = partial || p.slopes;
      if (positional) {
        // Positions relative to the tile's smallest key: exact in float for distances < 2^24.
        for (Index r = 0; r < Rp; ++r)
          ws.dq[r] = static_cast<float>(std::int64_t{p.q_pos[t0 + std::min(r, R - 1) / G]} - k_lo);
        for (Index c = 0; c < nc; ++c) ws.relk[c] = static_cast<float>(std::int64_t{kp[c]} - k_lo);
      }

      const RowsF32 keys = tiles.keys(d, ws.kbuf.data(), d, true);
      lanes_gemm(nc, d, Rp, keys.data, keys.stride, 1, qt, Rp, st, Rp, nullptr);

      for (Index r0 = 0; r0 < Rp; r0 += W) {
        const VecF dq = positional ? simd::load(ws.dq.data() + r0) : vzero;
        const VecF slope = simd::load(ws.slope.data() + r0);
        VecF mx = vneg_inf;
        for (Index c = 0; c < nc; ++c) {
          float* sp = st + c * Rp + r0;
          VecF s = simd::load(sp);
          if (softcap) s = cap * simd::tanh(s * inv_cap);
          if (positional) {
            const VecF rk = simd::broadcast(ws.relk[c]);
            if (p.slopes) s = simd::fma(slope, rk - dq, s);  // -slope * (q_pos - k_pos)
            if (partial) {
              if (p.mask.causal) s = simd::select(rk <= dq, s, vneg_inf);
              if (p.mask.window > 0) s = simd::select(dq - rk < vwindow, s, vneg_inf);
            }
          }
          simd::store(sp, s);
          mx = simd::max(mx, s);
        }
        const VecF m_old = simd::load(ws.m.data() + r0);
        const VecF m_new = simd::max(m_old, mx);
        const VecF m_use = simd::select(m_new == vneg_inf, vzero, m_new);  // all masked so far
        const VecF alpha = simd::exp(m_old - m_use);
        VecF sum = vzero;
        for (Index c = 0; c < nc; ++c) {
          float* sp = st + c * Rp + r0;
          const VecF e = simd::exp(simd::load(sp) - m_use);
          simd::store(sp, e);
          sum = sum + e;
        }
        simd::store(ws.l.data() + r0, simd::fma(simd::load(ws.l.data() + r0), alpha, sum));
        simd::store(ws.m.data() + r0, m_new);
        simd::store(ws.alpha.data() + r0, alpha);
      }

      const RowsF32 values = tiles.values(d, ws.vbuf.data(), d, true);
      lanes_gemm(d, nc, Rp, values.data, 1, values.stride, st, Rp, ot, Rp, ws.alpha.data());
    }
  }

  for (Index r = 0; r < R; ++r) {
    const Index t = t0 + r / G, h = g * G + r % G;
    const float l = ws.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* orow = p.out.ptr(t, h);
    for (Index k = 0; k < d; ++k) orow[k] = ot[k * Rp + r] * inv;
    if (p.lse.rows() > 0) p.lse(t, h) = l > 0.0f ? ws.m[r] + std::log(l) : neg_inf;
  }
}

}  // namespace inferkit::detail
