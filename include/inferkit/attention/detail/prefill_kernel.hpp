#pragma once
// Prefill / chunk attention for one (KV head, query tile) unit: FlashAttention-2 (Dao 2023) with
// the tile's query rows (query tokens x the group's query heads) in SIMD lanes. Q^T is packed
// once per unit; for each key tile S^T = K Q^T, the online-softmax statistics update lane-wise,
// and O^T = O^T diag(alpha) + V^T P^T. K and V are read once per group of query heads; memory is
// O(tile), never O(Tq * Tk). Key tiles sit at fixed token indices (multiples of kPrefillKeyTile,
// key_tiles.hpp), gathered across blocks when pages are smaller.
//
// Every lane's arithmetic is its own: a row's scores are FMA chains over head_dim in order, its
// softmax statistics and output accumulate over the tile's keys in order, and nothing mixes
// lanes. A row's bits therefore depend only on its own query, its keys and the key tiles, which
// is what the batch-invariant mode builds on (lanes_sweep with merge boundaries, below, and
// invariant_kernel.hpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "inferkit/attention/detail/key_tiles.hpp"
#include "inferkit/attention/detail/lanes_gemm.hpp"
#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/detail/score_rule.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"

namespace inferkit::detail {

inline constexpr Index kPrefillKeyTile = kBatchInvariantKeyTile;  // keys per tile
inline constexpr Index kPrefillTargetRows = 64;                   // query rows (tokens x group heads) per unit

/// Query tokens per prefill unit for a group size.
inline Index prefill_query_tokens(Index group) { return std::max<Index>(1, kPrefillTargetRows / group); }

/// Rows padded to whole vectors (rows live in lanes).
inline Index lanes_padded_rows(Index rows) {
  constexpr Index W = static_cast<Index>(simd::kWidth);
  return ceil_div(rows, W) * W;
}

struct PrefillScratch {
  AlignedBuffer<float> qt, st, ot, ot2, kbuf, vbuf;
  AlignedBuffer<float> m, l, alpha, dq, slope, relk, m2, l2, wa, wb, dist, seen;
  AlignedBuffer<std::int32_t> kpos;  // positions of a tile gathered across blocks
};

/// The lanes kernel's view of a unit: rows r < R are query token t0 + r / G, head g * G + r % G.
struct LanesRows {
  Index g = 0, t0 = 0, R = 0, Rp = 0;
};

/// Packs Q^T [d][Rp] (scaled; padding rows zero), the rows' ALiBi slopes, and starts every row's
/// state empty (m = -inf, l = 0).
inline void lanes_begin(const SequenceProblem& p, const LanesRows& u, PrefillScratch& ws) {
  const Index d = p.head_dim(), G = p.group, Rp = u.Rp;
  ws.qt.resize(static_cast<std::size_t>(d * Rp));
  ws.st.resize(static_cast<std::size_t>(kPrefillKeyTile * Rp));
  ws.kbuf.resize(static_cast<std::size_t>(kPrefillKeyTile * d));
  for (auto* b : {&ws.m, &ws.l, &ws.alpha, &ws.dq, &ws.slope, &ws.m2, &ws.l2, &ws.wa, &ws.wb})
    b->resize(static_cast<std::size_t>(Rp));
  ws.relk.resize(static_cast<std::size_t>(kPrefillKeyTile));
  ws.dist.resize(simd::kWidth);
  ws.seen.resize(simd::kWidth);
  ws.kpos.resize(static_cast<std::size_t>(kPrefillKeyTile));
  float* qt = ws.qt.data();
  for (Index r = 0; r < Rp; ++r) {
    if (r < u.R) {
      const float* qrow = p.q.ptr(u.t0 + r / G, u.g * G + r % G);
      for (Index k = 0; k < d; ++k) qt[k * Rp + r] = p.score.scaled(qrow[k]);
    } else {
      for (Index k = 0; k < d; ++k) qt[k * Rp + r] = 0.0f;
    }
    ws.m[r] = kNegInf;
    ws.l[r] = 0.0f;
    ws.slope[r] = r < u.R ? p.score.slope(u.g * G + r % G) : 0.0f;
  }
}

/// The online softmax over the key tiles of tokens [begin, end) for the unit's rows: per visible
/// tile, S^T = K Q^T, the score rule (soft-cap, ALiBi, mask: score_rule.hpp), then the statistics update; P^T [nc][Rp]
/// is left in ws.st and the rescale factors in ws.alpha for `pv(tiles, nc)` to apply O = O * alpha + P V. With
/// merge_every > 0, `boundary()` runs before the first tile at each multiple of merge_every past `begin` (the
/// batch-invariant mode folds its state there). A tile fully masked for some rows leaves their state bit for bit as it
/// was (alpha = exp(0) = 1, every weight exactly 0), so skipping tiles no row sees changes nothing either.
template <KvSource S, class PV, class Boundary>
void lanes_sweep(const SequenceProblem& p, const S& kv, const LanesRows& u, Index begin, Index end, Index merge_every,
                 PrefillScratch& ws, PV&& pv, Boundary&& boundary) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  const Index d = p.head_dim(), G = p.group, R = u.R, Rp = u.Rp;
  float* st = ws.st.data();
  std::int64_t q_lo = 0, q_hi = 0;
  position_range(p.q_pos.offset(u.t0), ceil_div(R, G), q_lo, q_hi);

  const ScoreRule& rule = p.score;
  const ScoreVectors rv = rule.vectors();
  const VecF vneg_inf = rv.neg_inf, vzero = rv.zero;

  KeyTileWalker<S> tiles(kv, u.g, begin, end, kPrefillKeyTile);
  while (tiles.next()) {
    if (merge_every > 0 && tiles.begin() > begin && tiles.begin() % merge_every == 0) boundary();
    Index nc = tiles.count();
    const TokenPositions kp = tiles.positions(ws.kpos.data());
    // Trailing keys after every row's position (the causal diagonal) would only add exact zeros.
    if (rule.mask.causal)
      while (nc > 0 && kp[nc - 1] > q_hi) --nc;
    if (nc == 0) continue;
    std::int64_t k_lo = 0, k_hi = 0;
    position_range(kp, nc, k_lo, k_hi);
    const TileVisibility vis = rule.mask.classify(q_lo, q_hi, k_lo, k_hi);
    if (vis == TileVisibility::kNone) continue;
    const bool partial = vis == TileVisibility::kPartial;
    const bool positional = partial || rule.slopes;
    // Positions relative to the tile's smallest key, as floats: exact while the tile's keys and
    // a row's query lie within 2^23 of it (then every difference k - p is an exact float too). A
    // group of rows where they do not (explicit positions far apart) takes the per-lane path,
    // which masks by integer comparison and converts k - p once; on exact rows both give the
    // same bits (rk - dq is then the correctly rounded k - p), so the choice of path, which
    // depends on the other rows of the group, never changes a row's bits.
    constexpr std::int64_t kExactSpan = std::int64_t{1} << 23;
    const bool keys_exact = k_hi - k_lo < kExactSpan;
    const auto row_pos = [&](Index r) { return std::int64_t{p.q_pos[u.t0 + std::min(r, R - 1) / G]}; };
    if (positional) {
      for (Index r = 0; r < Rp; ++r) ws.dq[r] = static_cast<float>(row_pos(r) - k_lo);
      for (Index c = 0; c < nc; ++c) ws.relk[c] = static_cast<float>(std::int64_t{kp[c]} - k_lo);
    }

    const RowsF32 keys = tiles.keys(d, ws.kbuf.data(), d, true);
    lanes_gemm(nc, d, Rp, keys.data, keys.stride, 1, ws.qt.data(), Rp, st, Rp, nullptr);

    for (Index r0 = 0; r0 < Rp; r0 += W) {
      const VecF dq = positional ? simd::load(ws.dq.data() + r0) : vzero;
      const VecF slope = simd::load(ws.slope.data() + r0);
      bool group_exact = keys_exact;
      for (Index r = r0; r < r0 + W && group_exact; ++r) group_exact = std::abs(row_pos(r) - k_lo) < kExactSpan;
      VecF mx = vneg_inf;
      for (Index c = 0; c < nc; ++c) {
        float* sp = st + c * Rp + r0;
        VecF s = simd::load(sp);
        if (rule.capped()) s = ScoreRule::soft_cap(s, rv);
        if (positional && !group_exact) {
          for (Index i = 0; i < W; ++i) {
            const std::int64_t qp = row_pos(r0 + i);
            ws.dist[i] = static_cast<float>(std::int64_t{kp[c]} - qp);
            ws.seen[i] = !partial || rule.mask.visible(qp, kp[c]) ? 1.0f : 0.0f;
          }
          if (rule.slopes) s = ScoreRule::alibi(s, slope, simd::load(ws.dist.data()));
          if (partial) s = ScoreRule::mask_lanes(s, simd::load(ws.seen.data()), rv);
        } else if (positional) {
          const VecF rk = simd::broadcast(ws.relk[c]);
          if (rule.slopes) s = ScoreRule::alibi(s, slope, rk - dq);
          if (partial) s = rule.mask_relative(s, rk, dq, rv);
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
    pv(tiles, nc);
  }
}

/// Merge weights of two lane states (m, l per row): folds (mb, lb) into (ma, la) and leaves
/// wa = exp(ma - m), wb = exp(mb - m) for the outputs, m = max(ma, mb) (0 in place of -inf when
/// both are empty). Merging an empty state (m = -inf, l = 0) leaves the other bit for bit.
inline void lanes_merge_stats(float* ma, float* la, const float* mb, const float* lb, Index Rp, float* wa, float* wb) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  const VecF vneg_inf = simd::broadcast(kNegInf), vzero = simd::broadcast(0.0f);
  for (Index r0 = 0; r0 < Rp; r0 += W) {
    const VecF a = simd::load(ma + r0), b = simd::load(mb + r0);
    const VecF m = simd::max(a, b);
    const VecF mu = simd::select(m == vneg_inf, vzero, m);
    const VecF xa = simd::exp(a - mu), xb = simd::exp(b - mu);
    simd::store(la + r0, simd::fma(simd::load(la + r0), xa, simd::load(lb + r0) * xb));
    simd::store(ma + r0, m);
    simd::store(wa + r0, xa);
    simd::store(wb + r0, xb);
  }
}

/// Output element of a folded state: o = o_a * wa + o_b * wb.
inline simd::VecF lanes_merge_value(simd::VecF oa, simd::VecF wa, simd::VecF ob, simd::VecF wb) {
  return simd::fma(oa, wa, ob * wb);
}

/// Normalized output element o / l, with +0.0f turning a -0 into +0: whether a zero
/// accumulator carries a sign depends on which masked keys were visited, the value never does.
inline float lanes_output(float o, float inv_l) { return o * inv_l + 0.0f; }

/// How a finished row is normalized: out = o * inv; lse is its natural-log LSE.
struct RowNormalization {
  float inv = 0.0f;     ///< factor of the unnormalized output (0 when the row saw nothing)
  float lse = kNegInf;  ///< LSE including the sink logit, if any (-inf when empty)
};

/// Normalization of query head h's row with state (m, l): the head's sink logit, if the problem
/// has them, joins the denominator once here, after every piece has merged (options.hpp).
inline RowNormalization row_normalization(const SequenceProblem& p, Index h, float m, float l) {
  SoftmaxStats st{m, l};
  const float alpha = p.sinks ? online_softmax_add_sink(st, p.sinks[h]) : 1.0f;
  return {st.sum > 0.0f ? alpha / st.sum : 0.0f, st.lse()};
}

/// Attention of query tokens [t0, t1) of KV head g over all of kv, written to p.out / p.lse.
/// With merge_every > 0 (batch-invariant mode) the state restarts at each multiple of
/// merge_every and the pieces fold in order, exactly as split units merge (invariant_kernel.hpp).
template <KvSource S>
void prefill_unit(const SequenceProblem& p, const S& kv, Index g, Index t0, Index t1, PrefillScratch& ws,
                  Index merge_every = 0) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  const Index d = p.head_dim(), G = p.group;
  const LanesRows u{g, t0, (t1 - t0) * G, lanes_padded_rows((t1 - t0) * G)};
  const Index Rp = u.Rp;
  lanes_begin(p, u, ws);
  ws.ot.resize(static_cast<std::size_t>(d * Rp));
  ws.vbuf.resize(static_cast<std::size_t>(kPrefillKeyTile * d));
  float* ot = ws.ot.data();
  std::fill(ot, ot + d * Rp, 0.0f);

  // Batch-invariant folding: the finished pieces' state (ot2, m2, l2), the running piece's (ot, m, l).
  bool folded = false, touched = false;
  const auto fold = [&] {
    if (!touched) return;  // an untouched piece is empty: folding it changes nothing
    if (!folded) {
      std::swap(ws.ot, ws.ot2);
      std::swap(ws.m, ws.m2);
      std::swap(ws.l, ws.l2);
      folded = true;
    } else {
      lanes_merge_stats(ws.m2.data(), ws.l2.data(), ws.m.data(), ws.l.data(), Rp, ws.wa.data(), ws.wb.data());
      float* o2 = ws.ot2.data();
      const float* o1 = ws.ot.data();
      for (Index k = 0; k < d; ++k)
        for (Index r0 = 0; r0 < Rp; r0 += W) {
          const std::size_t i = static_cast<std::size_t>(k * Rp + r0);
          simd::store(o2 + i, lanes_merge_value(simd::load(o2 + i), simd::load(ws.wa.data() + r0), simd::load(o1 + i),
                                                simd::load(ws.wb.data() + r0)));
        }
    }
    ws.ot.resize(static_cast<std::size_t>(d * Rp));
    std::fill(ws.ot.data(), ws.ot.data() + d * Rp, 0.0f);
    std::fill(ws.m.data(), ws.m.data() + Rp, kNegInf);
    std::fill(ws.l.data(), ws.l.data() + Rp, 0.0f);
    touched = false;
  };
  lanes_sweep(
      p, kv, u, 0, kv.num_tokens(), merge_every, ws,
      [&](const KeyTileWalker<S>& tiles, Index nc) {
        const RowsF32 values = tiles.values(d, ws.vbuf.data(), d, true);
        lanes_gemm(d, nc, Rp, values.data, 1, values.stride, ws.st.data(), Rp, ws.ot.data(), Rp, ws.alpha.data());
        touched = true;
      },
      fold);
  if (merge_every > 0) fold();
  const float* o = folded ? ws.ot2.data() : ws.ot.data();
  const float* m = folded ? ws.m2.data() : ws.m.data();
  const float* l = folded ? ws.l2.data() : ws.l.data();

  for (Index r = 0; r < u.R; ++r) {
    const Index t = t0 + r / G, h = g * G + r % G;
    const RowNormalization n = row_normalization(p, h, m[r], l[r]);
    float* orow = p.out.ptr(t, h);
    for (Index k = 0; k < d; ++k) orow[k] = lanes_output(o[k * Rp + r], n.inv);
    if (p.lse.rows() > 0) p.lse(t, h) = n.lse;
  }
}

}  // namespace inferkit::detail
