#pragma once
// Decode attention (few query rows, long KV) for one (KV head, token range) unit, producing an
// unnormalized partial state (o, max, sum) per query row; split-KV units are merged exactly
// afterwards (flash-decoding). Rows are few, so the kernel vectorizes along head_dim: dot
// products for a block of kKB keys x kRB rows accumulate in kKB * kRB = kWidth registers and
// reduce in one transposing horizontal add. Every K/V byte is streamed once for the whole group
// of query heads.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/simd.hpp"
#include "inferkit/core/threading.hpp"

namespace inferkit::detail {

inline constexpr Index kDecodeMaxQueries = 8;  // query tokens up to which the decode path runs
inline constexpr Index kDecodeKeyTile = 64;

struct DecodeShape {
  static constexpr Index kW = static_cast<Index>(simd::kWidth);
  static constexpr Index kRB = kW >= 4 ? 4 : 1;  // query rows per reduction block
  static constexpr Index kKB = kW / kRB;         // keys per reduction block
  static_assert(kKB * kRB == kW);
};

/// Rows (query tokens x group heads) of a decode partial, padded for the reduction blocks.
inline Index decode_padded_rows(Index rows) { return ceil_div(rows, DecodeShape::kRB) * DecodeShape::kRB; }
inline Index decode_padded_dim(Index d) { return ceil_div(d, DecodeShape::kW) * DecodeShape::kW; }

struct DecodeScratch {
  AlignedBuffer<float> q, s, kbuf, vbuf, alpha;
};

// o[r][:] = o[r][:] * alpha[r] + sum_c p[r][c] * v[c][:] for ROWS rows and NV vectors of head_dim.
template <int ROWS, int NV>
inline void decode_pv_block(float* o, Index o_stride, const float* p, Index p_stride, const float* alpha,
                            const float* v, Index v_stride, Index nc) {
  using simd::VecF;
  constexpr Index W = DecodeShape::kW;
  VecF acc[ROWS][NV];
  for (int r = 0; r < ROWS; ++r) {
    const VecF a = simd::broadcast(alpha[r]);
    for (int j = 0; j < NV; ++j) acc[r][j] = simd::load(o + r * o_stride + j * W) * a;
  }
  for (Index c = 0; c < nc; ++c) {
    VecF vv[NV];
    for (int j = 0; j < NV; ++j) vv[j] = simd::load(v + c * v_stride + j * W);
    for (int r = 0; r < ROWS; ++r) {
      const VecF pr = simd::broadcast(p[r * p_stride + c]);
      for (int j = 0; j < NV; ++j) acc[r][j] = simd::fma(pr, vv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NV; ++j) simd::store(o + r * o_stride + j * W, acc[r][j]);
}

template <int ROWS, int NV = 8>
inline void decode_pv_chunk(Index nv, float* o, Index o_stride, const float* p, Index p_stride, const float* alpha,
                            const float* v, Index v_stride, Index nc) {
  if constexpr (NV > 0) {
    if (nv == NV) return decode_pv_block<ROWS, NV>(o, o_stride, p, p_stride, alpha, v, v_stride, nc);
    decode_pv_chunk<ROWS, NV - 1>(nv, o, o_stride, p, p_stride, alpha, v, v_stride, nc);
  }
}

/// Partial attention of all query rows of KV head g over source tokens [begin, end) (global
/// token indices across blocks). Writes o [Rp][Dp] (unnormalized), m [Rp], l [Rp].
template <KvSource S>
void decode_partial(const SequenceProblem& p, const S& kv, Index g, Index begin, Index end, DecodeScratch& ws,
                    float* o, float* m, float* l) {
  using simd::VecF;
  constexpr Index W = DecodeShape::kW, RB = DecodeShape::kRB, KB = DecodeShape::kKB;
  constexpr Index Bc = kDecodeKeyTile;
  const Index d = p.head_dim(), G = p.group, tq = p.num_queries(), R = tq * G;
  const Index Rp = decode_padded_rows(R), Dp = decode_padded_dim(d);
  const bool in_place = Dp == d;

  ws.q.resize(static_cast<std::size_t>(Rp * Dp));
  ws.s.resize(static_cast<std::size_t>(Rp * Bc));
  ws.alpha.resize(static_cast<std::size_t>(Rp));
  ws.kbuf.resize(static_cast<std::size_t>(Bc * Dp));
  ws.vbuf.resize(static_cast<std::size_t>(Bc * Dp));
  if (!in_place) {  // decoded rows write d columns; the padding columns must read as zero
    ws.kbuf.fill(0.0f);
    ws.vbuf.fill(0.0f);
  }
  float* q = ws.q.data();
  float* s = ws.s.data();
  for (Index r = 0; r < Rp; ++r) {
    float* qr = q + r * Dp;
    if (r < R) {
      const float* src = p.q.ptr(r / G, g * G + r % G);
      for (Index k = 0; k < d; ++k) qr[k] = src[k] * p.scale;
      for (Index k = d; k < Dp; ++k) qr[k] = 0.0f;
    } else {
      std::fill(qr, qr + Dp, 0.0f);
    }
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  std::fill(o, o + Rp * Dp, 0.0f);
  std::int64_t q_lo = 0, q_hi = 0;
  position_range(p.q_pos, tq, q_lo, q_hi);
  alignas(64) float lanes[W];

  Index offset = 0;  // global index of the block's first token
  for (Index b = 0; b < kv.num_blocks() && offset < end; ++b) {
    const auto blk = kv.block(g, b);
    const Index lo = std::max<Index>(begin - offset, 0), hi = std::min<Index>(end - offset, blk.num_tokens);
    offset += blk.num_tokens;
    for (Index c0 = lo; c0 < hi; c0 += Bc) {
      const Index nc = std::min(Bc, hi - c0);
      const TokenPositions kp = blk.positions.offset(c0);
      std::int64_t k_lo = 0, k_hi = 0;
      position_range(kp, nc, k_lo, k_hi);
      const TileVisibility vis = p.mask.classify(q_lo, q_hi, k_lo, k_hi);
      if (vis == TileVisibility::kNone) continue;

      // Scores s[r][c] = q_r . k_c, kKB keys x kRB rows per horizontal reduction.
      const RowsF32 keys = blk.keys.load_f32(c0, nc, d, ws.kbuf.data(), Dp, in_place);
      for (Index kb = 0; kb < nc; kb += KB) {
        const float* krow[KB];
        for (Index i = 0; i < KB; ++i) krow[i] = keys.data + std::min(kb + i, nc - 1) * keys.stride;
        for (Index rb = 0; rb < Rp; rb += RB) {
          VecF acc[KB * RB];
          for (Index i = 0; i < KB * RB; ++i) acc[i] = simd::broadcast(0.0f);
          for (Index dv = 0; dv < Dp; dv += W) {
            VecF kvv[KB];
            for (Index i = 0; i < KB; ++i) kvv[i] = simd::load(krow[i] + dv);
            for (Index j = 0; j < RB; ++j) {
              const VecF qv = simd::load(q + (rb + j) * Dp + dv);
              for (Index i = 0; i < KB; ++i) acc[i * RB + j] = simd::fma(qv, kvv[i], acc[i * RB + j]);
            }
          }
          simd::store(lanes, simd::haddp(acc));
          for (Index i = 0; i < KB && kb + i < nc; ++i)
            for (Index j = 0; j < RB; ++j) s[(rb + j) * Bc + kb + i] = lanes[i * RB + j];
        }
      }

      // Soft-cap, ALiBi, mask, then the online-softmax update of each row.
      for (Index r = 0; r < R; ++r) {
        float* sr = s + r * Bc;
        const std::int64_t qp = p.q_pos[r / G];
        if (p.softcap > 0.0f) {
          const VecF cap = simd::broadcast(p.softcap), inv = simd::broadcast(1.0f / p.softcap);
          Index c = 0;
          for (; c + W <= nc; c += W) simd::store(sr + c, cap * simd::tanh(simd::load(sr + c) * inv));
          for (; c < nc; ++c) sr[c] = p.softcap * std::tanh(sr[c] / p.softcap);
        }
        if (p.slopes) {
          const float slope = p.slopes[g * G + r % G];
          for (Index c = 0; c < nc; ++c) sr[c] -= slope * static_cast<float>(qp - kp[c]);
        }
        if (vis == TileVisibility::kPartial)
          for (Index c = 0; c < nc; ++c)
            if (!p.mask.visible(qp, kp[c])) sr[c] = kNegInf;
        const float m_new = std::max(m[r], simd::max_of(sr, static_cast<std::size_t>(nc)));
        const float m_use = m_new == kNegInf ? 0.0f : m_new;
        const float alpha = std::exp(m[r] - m_use);
        l[r] = l[r] * alpha + simd::exp_shifted(sr, sr, static_cast<std::size_t>(nc), m_use);
        m[r] = m_new;
        ws.alpha[r] = alpha;
      }

      // o = o * alpha + P V, two rows and up to eight vectors of head_dim at a time.
      const RowsF32 values = blk.values.load_f32(c0, nc, d, ws.vbuf.data(), Dp, in_place);
      for (Index r = 0; r < R; r += 2) {
        const Index rows = std::min<Index>(2, R - r);
        for (Index j0 = 0; j0 < Dp; j0 += 8 * W) {
          const Index nv = std::min<Index>(8, (Dp - j0) / W);
          float* orow = o + r * Dp + j0;
          const float* vrow = values.data + j0;
          if (rows == 2) decode_pv_chunk<2>(nv, orow, Dp, s + r * Bc, Bc, ws.alpha.data() + r, vrow, values.stride, nc);
          else decode_pv_chunk<1>(nv, orow, Dp, s + r * Bc, Bc, ws.alpha.data() + r, vrow, values.stride, nc);
        }
      }
    }
  }
}

}  // namespace inferkit::detail
