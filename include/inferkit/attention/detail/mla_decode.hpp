#pragma once
// The absorbed MLA decode step's attention over the latent stream (mla.hpp), for the case every
// query row sees every cached token (decode at the stream's end: causal at the last position,
// no window, no soft-cap, no ALiBi, exact arithmetic, not batch-invariant; anything else runs
// attention()). All Tq x H rows are one tile in SIMD lanes over one shared stream, so both sweeps
// are matrix products with the rows as the N dimension (prefill_kernel.hpp's form):
//   S^T [nc][Rp] = K Q~^T     (K = nc latent rows of d = kv_lora_rank + qk_rope_dim values)
//   O^T [dv][Rp] = O^T diag(alpha) + V^T P^T   (V = the same rows, only their first dv values)
// What it does differently from attention()'s lanes decode, measured in bench/mla_bench.cpp:
//  - Q~^T is packed once per call, not once per split unit (16 units at Tk 8192).
//  - P V runs with the rows in lanes too (latent values broadcast, P^T rows as vectors:
//    lanes_gemm's 6 x 4 zmm / 6 x 2 ymm accumulators) instead of head_dim in lanes (decode_pv's
//    4 x 4 accumulators re-stream the whole value tile from L2 for every 4 rows, and on AVX2
//    spill: 16 accumulators + 4 values exceed the 16 ymm registers).
//  - The weighted sum covers only the dv = kv_lora_rank columns W_UV reads, not the k_pe tail
//    (qk_rope_dim / (kv_lora_rank + qk_rope_dim) = 11% of the p.v work at DeepSeek's shapes).
// The KV range is cut into fixed splits (chosen from Tk and options.kv_split_tokens, never from
// the thread count); each split's unnormalized state (O^T, m, l) comes from one thread and the
// states fold in split order (FlashDecoding, Dao et al. 2023), so the bits are the same at any
// thread count. Sink logits join once per row after the fold (options.hpp).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "inferkit/attention/detail/decode_kernel.hpp"
#include "inferkit/attention/detail/key_tiles.hpp"
#include "inferkit/attention/detail/lanes_gemm.hpp"
#include "inferkit/attention/detail/prefill_kernel.hpp"
#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/options.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/simd.hpp"

namespace inferkit::detail {

/// Keys per tile of the MLA decode sweep.
inline constexpr Index kMlaKeyTile = 64;
/// Smallest automatic split (tokens) and the split count it aims at: 8 splits keep 2 to 4
/// threads busy (dynamic schedule) while each split's 256 KB state (dv 512 x 128 rows) stays
/// L2-sized; smaller splits cost one state fold each.
inline constexpr Index kMlaMinSplitTokens = 1024;
inline constexpr Index kMlaTargetSplits = 8;

/// Tokens per split: options.kv_split_tokens when set, else ceil(Tk / 8) rounded up to whole key
/// tiles, at least kMlaMinSplitTokens. Depends on Tk and the options only.
inline Index mla_split_tokens(Index tk, Index requested) {
  if (requested > 0) return requested;
  const Index per = ceil_div(ceil_div(std::max<Index>(tk, 1), kMlaTargetSplits), kMlaKeyTile) * kMlaKeyTile;
  return std::max(kMlaMinSplitTokens, per);
}

/// True when the MLA decode kernel computes exactly what attention() would for these options:
/// 1..kDecodeMaxQueries query tokens over a non-empty source, every row seeing every key (no
/// window, and when causal every key position <= the smallest query position), plain scores.
template <KvSource S>
bool mla_decode_applies(const S& kv, Index tq, const AttentionOptions& o) {
  if (tq < 1 || tq > kDecodeMaxQueries || kv.num_tokens() == 0) return false;
  if (o.batch_invariant || o.arithmetic != AttentionArithmetic::kExact) return false;
  if (o.window != 0 || o.softcap != 0.0f || o.alibi || !o.alibi_slopes.empty()) return false;
  if (!o.causal) return true;
  std::int64_t key_hi = std::numeric_limits<std::int64_t>::min();
  for (Index b = 0; b < kv.num_blocks(); ++b) {
    const auto blk = kv.block(0, b);
    if (blk.num_tokens == 0) continue;
    std::int64_t lo = 0, hi = 0;
    position_range(blk.positions, blk.num_tokens, lo, hi);
    key_hi = std::max(key_hi, hi);
  }
  std::int64_t q_lo = 0;
  if (o.query_positions.empty()) {
    q_lo = std::int64_t{last_position(kv)} - (tq - 1);
  } else {
    if (static_cast<Index>(o.query_positions.size()) != tq) return false;  // attention() reports it
    q_lo = *std::min_element(o.query_positions.begin(), o.query_positions.end());
  }
  return key_hi <= q_lo;
}

/// True when every block's value rows are its key rows (a LatentCache's source, DenseKv(rows,
/// rows)): each key tile is then decoded to f32 once for both products.
template <KvSource S>
bool mla_values_alias_keys(const S& kv) {
  for (Index b = 0; b < kv.num_blocks(); ++b) {
    const auto blk = kv.block(0, b);
    if constexpr (std::is_same_v<decltype(blk.keys), decltype(blk.values)> && requires {
                    blk.keys.data;
                    blk.keys.row_stride;
                  }) {
      if (blk.keys.data != blk.values.data || blk.keys.row_stride != blk.values.row_stride) return false;
    } else {
      return false;
    }
  }
  return true;
}

struct MlaDecodeScratch {
  AlignedBuffer<float> st, kbuf, vbuf, alpha;
};

/// One split: the unnormalized state over tokens [begin, end) of all R = Tq * H rows (query
/// token r / H, head r % H): ot [dv][Rp], m [Rp], l [Rp]. qt is Q~^T [d][Rp] (scaled, padding
/// rows zero).
template <KvSource S>
void mla_decode_split(const S& kv, bool alias, Index begin, Index end, Index d, Index dv, Index Rp, const float* qt,
                      MlaDecodeScratch& ws, float* ot, float* m, float* l) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  ws.st.resize(static_cast<std::size_t>(kMlaKeyTile * Rp));
  ws.kbuf.resize(static_cast<std::size_t>(kMlaKeyTile * d));
  ws.vbuf.resize(static_cast<std::size_t>(kMlaKeyTile * d));
  ws.alpha.resize(static_cast<std::size_t>(Rp));
  float* st = ws.st.data();
  std::fill(ot, ot + dv * Rp, 0.0f);
  std::fill(m, m + Rp, kNegInf);
  std::fill(l, l + Rp, 0.0f);
  const VecF vneg_inf = simd::broadcast(kNegInf), vzero = simd::broadcast(0.0f);
  KeyTileWalker<S> tiles(kv, 0, begin, end, kMlaKeyTile);
  while (tiles.next()) {
    const Index nc = tiles.count();
    const RowsF32 keys = tiles.keys(d, ws.kbuf.data(), d, true);
    lanes_gemm(nc, d, Rp, keys.data, keys.stride, 1, qt, Rp, st, Rp, nullptr);
    // The online softmax per row, lane-wise (prefill_kernel.hpp's update without masks).
    for (Index r0 = 0; r0 < Rp; r0 += W) {
      VecF mx = vneg_inf;
      for (Index c = 0; c < nc; ++c) mx = simd::max(mx, simd::load(st + c * Rp + r0));
      const VecF m_old = simd::load(m + r0);
      const VecF m_new = simd::max(m_old, mx);
      const VecF m_use = simd::select(m_new == vneg_inf, vzero, m_new);
      const VecF alpha = simd::exp(m_old - m_use);
      VecF sum = vzero;
      for (Index c = 0; c < nc; ++c) {
        float* sp = st + c * Rp + r0;
        const VecF e = simd::exp(simd::load(sp) - m_use);
        simd::store(sp, e);
        sum = sum + e;
      }
      simd::store(l + r0, simd::fma(simd::load(l + r0), alpha, sum));
      simd::store(m + r0, m_new);
      simd::store(ws.alpha.data() + r0, alpha);
    }
    const RowsF32 values = alias ? keys : tiles.values(d, ws.vbuf.data(), d, true);
    lanes_gemm(dv, nc, Rp, values.data, 1, values.stride, st, Rp, ot, Rp, ws.alpha.data());
  }
}

/// attention() of p's rows (group = all H heads of the one latent head) over kv, for sources and
/// options where mla_decode_applies(): writes the first dv columns of each p.out row (the rest
/// are left as they are) and p.lse. `threads` OpenMP threads (resolved).
template <KvSource S>
void mla_decode_attention(const SequenceProblem& p, const S& kv, Index dv, Index split_tokens, int threads) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  const Index d = p.head_dim(), G = p.group, R = p.num_queries() * G, Rp = lanes_padded_rows(R);
  const Index tk = kv.num_tokens(), splits = ceil_div(tk, split_tokens);
  const bool alias = mla_values_alias_keys(kv);
  AlignedBuffer<float> qt(static_cast<std::size_t>(d * Rp));
  for (Index r = 0; r < Rp; ++r) {
    if (r < R) {
      const float* qrow = p.q.ptr(r / G, r % G);
      for (Index k = 0; k < d; ++k) qt[static_cast<std::size_t>(k * Rp + r)] = p.score.scaled(qrow[k]);
    } else {
      for (Index k = 0; k < d; ++k) qt[static_cast<std::size_t>(k * Rp + r)] = 0.0f;
    }
  }
  const auto state = static_cast<std::size_t>(dv * Rp);
  AlignedBuffer<float> ot(static_cast<std::size_t>(splits) * state), m(static_cast<std::size_t>(splits * Rp)),
      l(static_cast<std::size_t>(splits * Rp)), wa(static_cast<std::size_t>(splits * Rp)),
      wb(static_cast<std::size_t>(splits * Rp));
  const auto n_splits = static_cast<std::int64_t>(splits);
#pragma omp parallel num_threads(threads) if (n_splits > 1)
  {
    MlaDecodeScratch ws;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t s = 0; s < n_splits; ++s) {
      const Index b = static_cast<Index>(s) * split_tokens;
      mla_decode_split(kv, alias, b, std::min(tk, b + split_tokens), d, dv, Rp, qt.data(), ws,
                       ot.data() + static_cast<std::size_t>(s) * state, m.data() + s * Rp, l.data() + s * Rp);
    }
    // Fold the splits in order into split 0: the statistics first (Rp lanes per split, one
    // thread), then each value row independently.
#pragma omp single
    for (Index s = 1; s < splits; ++s)
      lanes_merge_stats(m.data(), l.data(), m.data() + s * Rp, l.data() + s * Rp, Rp, wa.data() + s * Rp,
                        wb.data() + s * Rp);
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(dv); ++k) {
      float* o0 = ot.data() + k * Rp;
      for (Index s = 1; s < splits; ++s) {
        const float* os = ot.data() + static_cast<std::size_t>(s) * state + k * Rp;
        for (Index r0 = 0; r0 < Rp; r0 += W)
          simd::store(o0 + r0, lanes_merge_value(simd::load(o0 + r0), simd::load(wa.data() + s * Rp + r0),
                                                 simd::load(os + r0), simd::load(wb.data() + s * Rp + r0)));
      }
    }
  }
  for (Index r = 0; r < R; ++r) {
    const Index t = r / G, h = r % G;
    const RowNormalization n = row_normalization(p, h, m[static_cast<std::size_t>(r)], l[static_cast<std::size_t>(r)]);
    float* orow = p.out.ptr(t, h);
    for (Index k = 0; k < dv; ++k) orow[k] = lanes_output(ot[static_cast<std::size_t>(k * Rp + r)], n.inv);
    if (p.lse.rows() > 0) p.lse(t, h) = n.lse;
  }
}

}  // namespace inferkit::detail
