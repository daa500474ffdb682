#pragma once
// Decode attention (few query rows, long KV) for one (KV head, token range) unit, producing an
// unnormalized partial state (o, max, sum) per query row; split-KV units are merged exactly
// afterwards (flash-decoding). Rows are few, so dot products vectorize along head_dim: a block
// of kKB keys x kRB rows accumulates in kKB * kRB = kWidth registers and one transposing
// horizontal add yields kWidth scores. Scores are kept as S^T [key][row] with the padded row
// count Rp either dividing the vector width or a multiple of it, so the online softmax runs
// lane-wise over whole vectors. P V takes 4 rows x 4 vectors of head_dim per pass, so each V
// row is loaded once per 4 query rows. Every K/V byte is streamed once for the whole group of
// query heads; 16-bit rows are widened and quantized rows (8, 4 or 2 bits, per token or per
// channel) dequantized in registers (row_readers.hpp: no scratch copy) where the ISA allows.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/detail/reduced_decode.hpp"
#include "inferkit/attention/detail/row_readers.hpp"
#include "inferkit/attention/detail/score_rule.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/convert.hpp"
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

/// Padded row count: a power of two >= kRB when it fits in a vector (so it divides kWidth),
/// else a multiple of kWidth.
inline Index decode_padded_rows(Index rows) {
  constexpr Index W = DecodeShape::kW;
  if (rows <= W) {
    Index rp = DecodeShape::kRB;
    while (rp < rows) rp *= 2;
    return rp;
  }
  return ceil_div(rows, W) * W;
}
inline Index decode_padded_dim(Index d) { return ceil_div(d, DecodeShape::kW) * DecodeShape::kW; }

struct DecodeScratch {
  AlignedBuffer<float> q, s, kbuf, vbuf, alpha, lanes;
  AlignedBuffer<float> kstep, kzero, vstep, vzero;  // quantized tiles: per row and group
  AlignedBuffer<std::int32_t> group_of, row_param;
  ReducedScratch red;  // AttentionArithmetic::kReduced
};

// o[r][:] = o[r][:] * alpha[r] + sum_c pt[c][r] * v[c][j0 + :] for ROWS rows and NV vectors.
template <class Reader, int ROWS, int NV>
inline void decode_pv_block(float* o, Index o_stride, const float* pt, Index pt_stride, const float* alpha,
                            const Reader& v, Index j0, Index nc) {
  using simd::VecF;
  constexpr Index W = DecodeShape::kW;
  VecF acc[ROWS][NV];
  for (int r = 0; r < ROWS; ++r) {
    const VecF a = simd::broadcast(alpha[r]);
    for (int j = 0; j < NV; ++j) acc[r][j] = simd::load(o + r * o_stride + j * W) * a;
  }
  for (Index c = 0; c < nc; ++c) {
    VecF vv[NV];
    const auto vrow = v.row(c);
    for (int j = 0; j < NV; ++j) vv[j] = vrow.load(j0 + j * W);
    for (int r = 0; r < ROWS; ++r) {
      const VecF pr = simd::broadcast(pt[c * pt_stride + r]);
      for (int j = 0; j < NV; ++j) acc[r][j] = simd::fma(pr, vv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NV; ++j) simd::store(o + r * o_stride + j * W, acc[r][j]);
}

template <class Reader, int ROWS>
inline void decode_pv_rows(Index nv, float* o, Index o_stride, const float* pt, Index pt_stride, const float* alpha,
                           const Reader& v, Index j0, Index nc) {
  switch (nv) {
    case 4:
      return decode_pv_block<Reader, ROWS, 4>(o, o_stride, pt, pt_stride, alpha, v, j0, nc);
    case 3:
      return decode_pv_block<Reader, ROWS, 3>(o, o_stride, pt, pt_stride, alpha, v, j0, nc);
    case 2:
      return decode_pv_block<Reader, ROWS, 2>(o, o_stride, pt, pt_stride, alpha, v, j0, nc);
    default:
      return decode_pv_block<Reader, ROWS, 1>(o, o_stride, pt, pt_stride, alpha, v, j0, nc);
  }
}

// o[r][:] = o[r][:] * alpha[r] + P V for rows [0, R): 4 rows x 4 vectors of head_dim per pass.
template <class Reader>
inline void decode_pv(float* o, Index Dp, const float* st, Index Rp, const float* alpha, Index R, const Reader& v,
                      Index nc) {
  constexpr Index W = DecodeShape::kW;
  for (Index r = 0; r < R; r += 4) {
    const Index rows = std::min<Index>(4, R - r);
    for (Index j0 = 0; j0 < Dp; j0 += 4 * W) {
      const Index nv = std::min<Index>(4, (Dp - j0) / W);
      float* orow = o + r * Dp + j0;
      switch (rows) {
        case 4:
          decode_pv_rows<Reader, 4>(nv, orow, Dp, st + r, Rp, alpha + r, v, j0, nc);
          break;
        case 3:
          decode_pv_rows<Reader, 3>(nv, orow, Dp, st + r, Rp, alpha + r, v, j0, nc);
          break;
        case 2:
          decode_pv_rows<Reader, 2>(nv, orow, Dp, st + r, Rp, alpha + r, v, j0, nc);
          break;
        default:
          decode_pv_rows<Reader, 1>(nv, orow, Dp, st + r, Rp, alpha + r, v, j0, nc);
          break;
      }
    }
  }
}

// S^T[c][r] = q_r . k_c for c < nc, r < Rp: kKB keys x kRB rows per horizontal reduction.
template <class Reader>
inline void decode_scores(const Reader& k, Index nc, const float* q, Index Rp, Index Dp, float* st, float* lanes) {
  using simd::VecF;
  constexpr Index W = DecodeShape::kW, RB = DecodeShape::kRB, KB = DecodeShape::kKB;
  for (Index kb = 0; kb < nc; kb += KB) {
    using Row = decltype(k.row(0));
    Row krow[KB];
    for (Index i = 0; i < KB; ++i) krow[i] = k.row(std::min(kb + i, nc - 1));
    for (Index rb = 0; rb < Rp; rb += RB) {
      VecF acc[KB * RB];
      for (Index i = 0; i < KB * RB; ++i) acc[i] = simd::broadcast(0.0f);
      for (Index dv = 0; dv < Dp; dv += W) {
        VecF kvv[KB];
        for (Index i = 0; i < KB; ++i) kvv[i] = krow[i].load(dv);
        for (Index j = 0; j < RB; ++j) {
          const VecF qv = simd::load(q + (rb + j) * Dp + dv);
          for (Index i = 0; i < KB; ++i) acc[i * RB + j] = simd::fma(qv, kvv[i], acc[i * RB + j]);
        }
      }
      const VecF sums = simd::haddp(acc);  // lane i * RB + j: key kb + i, row rb + j
      if (Rp == RB && kb + KB <= nc) {
        simd::store(st + kb * RB, sums);
      } else {
        simd::store(lanes, sums);
        for (Index i = 0; i < KB && kb + i < nc; ++i)
          for (Index j = 0; j < RB; ++j) st[(kb + i) * Rp + rb + j] = lanes[i * RB + j];
      }
    }
  }
}

/// The element type a row store exposes for in-register widening, or void.
template <class Rows>
using direct_element_t = std::remove_cvref_t<decltype(*std::declval<Rows>().direct_rows())>;
template <class Rows>
concept DirectRows = requires(const Rows& r) {
  {r.direct_rows()};
  { r.row_stride } -> std::convertible_to<Index>;
}
&&kLoadsInRegisters<direct_element_t<Rows>>;

// The online-softmax update over S^T [nc][Rp]: rows of lanes are rows (Rp a multiple of the
// width) or repeat with period Rp (Rp divides the width; the key count is padded with -inf).
inline void decode_softmax_update(float* st, Index nc, Index Rp, float* m, float* l, float* alpha, float* lanes) {
  using simd::VecF;
  constexpr Index W = DecodeShape::kW;
  const VecF neg_inf = simd::broadcast(kNegInf), zero = simd::broadcast(0.0f);
  if (Rp >= W) {
    for (Index r0 = 0; r0 < Rp; r0 += W) {
      VecF mx = neg_inf;
      for (Index c = 0; c < nc; ++c) mx = simd::max(mx, simd::load(st + c * Rp + r0));
      const VecF m_old = simd::load(m + r0);
      const VecF m_new = simd::max(m_old, mx);
      const VecF m_use = simd::select(m_new == neg_inf, zero, m_new);
      VecF sum = zero;
      for (Index c = 0; c < nc; ++c) {
        const VecF e = simd::exp(simd::load(st + c * Rp + r0) - m_use);
        simd::store(st + c * Rp + r0, e);
        sum = sum + e;
      }
      const VecF a = simd::exp(m_old - m_use);
      simd::store(l + r0, simd::fma(simd::load(l + r0), a, sum));
      simd::store(m + r0, m_new);
      simd::store(alpha + r0, a);
    }
    return;
  }
  // Rp divides W: each vector holds W / Rp keys x Rp rows.
  const Index per = W / Rp;
  const Index nvec = ceil_div(nc, per);
  for (Index i = nc * Rp; i < nvec * W; ++i) st[i] = kNegInf;  // pad the last vector's keys
  VecF mx = neg_inf;
  for (Index v = 0; v < nvec; ++v) mx = simd::max(mx, simd::load(st + v * W));
  simd::store(lanes, mx);
  for (Index r = 0; r < Rp; ++r) {
    float mr = lanes[r];
    for (Index k = 1; k < per; ++k) mr = std::max(mr, lanes[k * Rp + r]);
    const float m_new = std::max(m[r], mr);
    const float m_use = m_new == kNegInf ? 0.0f : m_new;
    alpha[r] = std::exp(m[r] - m_use);
    m[r] = m_new;
    for (Index k = 0; k < per; ++k) lanes[k * Rp + r] = m_use;
  }
  const VecF shift = simd::load(lanes);
  VecF sum = zero;
  for (Index v = 0; v < nvec; ++v) {
    const VecF e = simd::exp(simd::load(st + v * W) - shift);
    simd::store(st + v * W, e);
    sum = sum + e;
  }
  simd::store(lanes, sum);
  for (Index r = 0; r < Rp; ++r) {
    float sr = 0.0f;
    for (Index k = 0; k < per; ++k) sr += lanes[k * Rp + r];
    l[r] = l[r] * alpha[r] + sr;
  }
}

template <bool PerChannel, class F>
void dispatch_bits(int bits, const std::uint8_t* codes, Index code_bytes, const float* step, const float* zero,
                   Index stride, const std::int32_t* group_of, const std::int32_t* row_param, F&& f) {
  if (bits == 8) return f(QuantReader<8, PerChannel>{codes, code_bytes, step, zero, stride, group_of, row_param});
  if (bits == 4) return f(QuantReader<4, PerChannel>{codes, code_bytes, step, zero, stride, group_of, row_param});
  return f(QuantReader<2, PerChannel>{codes, code_bytes, step, zero, stride, group_of, row_param});
}

// Calls f(reader) for rows [c0, c0 + nc) of a row store: quantized codes dequantized in
// registers, plain rows widened in registers, or else rows decoded into `buf` (load_f32).
template <class Rows, class F>
void with_tile_reader(const Rows& rows, Index c0, Index nc, Index d, bool in_place, AlignedBuffer<float>& buf,
                      AlignedBuffer<float>& step, AlignedBuffer<float>& zero, DecodeScratch& ws, F&& f) {
  constexpr Index W = DecodeShape::kW;
  if constexpr (QuantizedRows<Rows> && kQuantInRegisters<8>) {
    const QuantRowsView v = rows.quantized_view();
    if (in_place && c0 + nc <= v.tokens && (v.per_channel || v.group_size % W == 0)) {
      const Index code_bytes = d * v.bits / 8;
      const std::uint8_t* codes = v.codes + c0 * code_bytes;
      if (v.per_channel) {  // the token groups the tile touches, one vector of d per group
        const Index g0 = c0 / v.group_size, ng = (c0 + nc - 1) / v.group_size - g0 + 1;
        step.resize(static_cast<std::size_t>(ng * d));
        zero.resize(static_cast<std::size_t>(ng * d));
        decode_quant_params(v, g0 * d, ng * d, step.data(), zero.data());
        ws.row_param.resize(static_cast<std::size_t>(nc));
        for (Index i = 0; i < nc; ++i)
          ws.row_param[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(((c0 + i) / v.group_size - g0) * d);
        return dispatch_bits<true>(v.bits, codes, code_bytes, step.data(), zero.data(), d, nullptr, ws.row_param.data(),
                                   f);
      }
      const Index groups = d / v.group_size;
      step.resize(static_cast<std::size_t>(nc * groups));
      zero.resize(static_cast<std::size_t>(nc * groups));
      decode_quant_params(v, c0 * groups, nc * groups, step.data(), zero.data());
      ws.group_of.resize(static_cast<std::size_t>(d / W));
      for (Index j = 0; j < d / W; ++j)
        ws.group_of[static_cast<std::size_t>(j)] = static_cast<std::int32_t>(j * W / v.group_size);
      return dispatch_bits<false>(v.bits, codes, code_bytes, step.data(), zero.data(), groups, ws.group_of.data(),
                                  nullptr, f);
    }
  }
  if constexpr (DirectRows<Rows>) {
    if (in_place)
      return f(PlainReader<direct_element_t<Rows>>{rows.direct_rows() + c0 * rows.row_stride, rows.row_stride});
    const RowsF32 r = rows.load_f32(c0, nc, d, buf.data(), decode_padded_dim(d), false);
    return f(PlainReader<float>{r.data, r.stride});
  } else {
    const RowsF32 r = rows.load_f32(c0, nc, d, buf.data(), decode_padded_dim(d), in_place);
    return f(PlainReader<float>{r.data, r.stride});
  }
}

/// Partial attention of all query rows of KV head g over source tokens [begin, end) (global
/// token indices across blocks). Writes o [Rp][Dp] (unnormalized), m [Rp], l [Rp].
template <KvSource S>
void decode_partial(const SequenceProblem& p, const S& kv, Index g, Index begin, Index end, DecodeScratch& ws, float* o,
                    float* m, float* l) {
  using simd::VecF;
  constexpr Index W = DecodeShape::kW;
  constexpr Index Bc = kDecodeKeyTile;
  const Index d = p.head_dim(), G = p.group, tq = p.num_queries(), R = tq * G;
  const Index Rp = decode_padded_rows(R), Dp = decode_padded_dim(d);
  const bool in_place = Dp == d;

  ws.q.resize(static_cast<std::size_t>(Rp * Dp));
  ws.s.resize(static_cast<std::size_t>(Rp * Bc + W));
  ws.alpha.resize(static_cast<std::size_t>(Rp));
  ws.lanes.resize(static_cast<std::size_t>(W));
  ws.kbuf.resize(static_cast<std::size_t>(Bc * Dp));
  ws.vbuf.resize(static_cast<std::size_t>(Bc * Dp));
  if (!in_place) {  // decoded rows write d columns; the padding columns must read as zero
    ws.kbuf.fill(0.0f);
    ws.vbuf.fill(0.0f);
  }
  float* q = ws.q.data();
  float* st = ws.s.data();
  for (Index r = 0; r < Rp; ++r) {
    float* qr = q + r * Dp;
    std::fill(qr, qr + Dp, 0.0f);
    if (r < R) {
      const float* src = p.q.ptr(r / G, g * G + r % G);
      for (Index k = 0; k < d; ++k) qr[k] = p.score.scaled(src[k]);
    }
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  std::fill(o, o + Rp * Dp, 0.0f);
  std::int64_t q_lo = 0, q_hi = 0;
  position_range(p.q_pos, tq, q_lo, q_hi);
  alignas(64) float lanes[W];
  ReducedScratch& rs = ws.red;
  rs.have_query = rs.perm_touched = rs.nat_touched = false;

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
      const TileVisibility vis = p.score.mask.classify(q_lo, q_hi, k_lo, k_hi);
      if (vis == TileVisibility::kNone) continue;

      // S^T = K q^T, reading the store's own rows where they widen or dequantize in registers;
      // in the reduced arithmetic with the rounded query, as integer dot products where possible.
      const float* qk = p.reduced ? reduced_query(blk.keys, q, Rp, Dp, d, rs) : q;
      if (!p.reduced || !reduced_scores(blk.keys, c0, nc, d, Rp, st, rs))
        with_tile_reader(blk.keys, c0, nc, d, in_place, ws.kbuf, ws.kstep, ws.kzero, ws,
                         [&](const auto& reader) { decode_scores(reader, nc, qk, Rp, Dp, st, lanes); });

      // The score rule (soft-cap, ALiBi, mask: score_rule.hpp), then the online-softmax update.
      const ScoreRule& rule = p.score;
      if (rule.capped()) {
        const ScoreVectors rv = rule.vectors();
        for (Index i = 0; i < nc * Rp; i += W) simd::store(st + i, ScoreRule::soft_cap(simd::load(st + i), rv));
      }
      const bool partial = vis == TileVisibility::kPartial;
      if (rule.slopes || partial) {
        for (Index c = 0; c < nc; ++c) {
          const std::int64_t kpos = kp[c];
          for (Index r = 0; r < R; ++r) {
            float& sc = st[c * Rp + r];
            sc = rule.biased_or_masked(sc, g * G + r % G, p.q_pos[r / G], kpos, partial);
          }
        }
      }
      decode_softmax_update(st, nc, Rp, m, l, ws.alpha.data(), ws.lanes.data());

      // o = o * alpha + P V (reduced: p rounded to bf16 over bf16 values; integer p.v over
      // 8- and 4-bit values, accumulated apart and folded into o at the end).
      const float* alpha = ws.alpha.data();
      if (p.reduced && reduced_pv(blk.values, c0, nc, d, st, Rp, R, alpha, o, Dp, rs)) continue;
      if (p.reduced) reduced_before_exact_pv(blk.values, st, nc, Rp, R, d, alpha, rs);
      with_tile_reader(blk.values, c0, nc, d, in_place, ws.vbuf, ws.vstep, ws.vzero, ws,
                       [&](const auto& reader) { decode_pv(o, Dp, st, Rp, alpha, R, reader, nc); });
    }
  }
  fold_reduced_pv(rs, R, d, Dp, o);
}

}  // namespace inferkit::detail
