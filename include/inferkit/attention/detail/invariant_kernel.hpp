#pragma once
// The batch-invariant mode's split units and their merge (options.hpp; docs/design.md,
// "Batch-invariant mode"). A row's result is defined as: its KV range cut at fixed multiples of
// the split size; each piece attended from an empty state over key tiles at fixed token indices
// by the lanes kernel (prefill_kernel.hpp: each lane's arithmetic its own); the pieces' states
// folded in order by lanes_merge_stats / lanes_merge_value; normalized by lanes_output.
//
// Query tiles with many rows (prefill chunks) compute this inside one unit (prefill_unit with
// merge_every). Rows of short queries (decode, speculative verification) get one unit per
// (KV head, split), run here, whose unnormalized states fold afterwards in split order: more
// parallelism, the same arithmetic. Their scores come from the same lanes product (a row's score
// is an FMA chain over head_dim in order, whatever lane it sits in); their P V runs with
// head_dim in lanes (decode_pv, no wasted lanes for 1..8 query tokens), which performs per
// output element exactly the lanes product's operations: o * alpha, then one FMA per key in key
// order. Empty pieces and fully masked tiles fold as exact no-ops.

#include <algorithm>
#include <cstdint>

#include "inferkit/attention/detail/decode_kernel.hpp"
#include "inferkit/attention/detail/key_tiles.hpp"
#include "inferkit/attention/detail/prefill_kernel.hpp"
#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/detail/row_readers.hpp"
#include "inferkit/core/simd.hpp"

namespace inferkit::detail {

/// The unnormalized state of all query rows of KV head g over source tokens [begin, end) (a
/// whole split): o [Rp][Dp] (rows layout, Rp = lanes_padded_rows(Tq * G), Dp =
/// decode_padded_dim(d)), m [Rp], l [Rp].
template <KvSource S>
void invariant_split_unit(const SequenceProblem& p, const S& kv, Index g, Index begin, Index end, PrefillScratch& ws,
                          float* o, float* m, float* l) {
  const Index d = p.head_dim(), G = p.group, R = p.num_queries() * G;
  const LanesRows u{g, 0, R, lanes_padded_rows(R)};
  const Index Rp = u.Rp, Dp = decode_padded_dim(d);
  lanes_begin(p, u, ws);
  ws.vbuf.resize(static_cast<std::size_t>(kPrefillKeyTile * Dp));
  if (Dp != d) std::fill(ws.vbuf.data(), ws.vbuf.data() + kPrefillKeyTile * Dp, 0.0f);  // padding columns read as 0
  std::fill(o, o + Rp * Dp, 0.0f);
  lanes_sweep(
      p, kv, u, begin, end, 0, ws,
      [&](const KeyTileWalker<S>& tiles, Index nc) {
        const RowsF32 v = tiles.values(d, ws.vbuf.data(), Dp, Dp == d);
        decode_pv(o, Dp, ws.st.data(), Rp, ws.alpha.data(), R, PlainReader<float>{v.data, v.stride}, nc);
      },
      [] {});
  std::copy_n(ws.m.data(), Rp, m);
  std::copy_n(ws.l.data(), Rp, l);
}

/// Folds the split states of one (sequence, KV head) in split order into the first one and writes
/// the normalized rows to p.out / p.lse. State s: o + s * o_stride ([Rp][Dp]), m / l + s * Rp.
inline void invariant_fold_splits(const SequenceProblem& p, Index g, Index splits, Index Rp, Index Dp, float* o,
                                  std::size_t o_stride, float* m, float* l, float* wa, float* wb) {
  using simd::VecF;
  constexpr Index W = static_cast<Index>(simd::kWidth);
  const Index d = p.head_dim(), G = p.group, R = p.num_queries() * G;
  for (Index s = 1; s < splits; ++s) {
    const float* os = o + static_cast<std::size_t>(s) * o_stride;
    lanes_merge_stats(m, l, m + s * Rp, l + s * Rp, Rp, wa, wb);
    for (Index r = 0; r < R; ++r) {
      const VecF a = simd::broadcast(wa[r]), b = simd::broadcast(wb[r]);
      for (Index j = 0; j < Dp; j += W)
        simd::store(o + r * Dp + j, lanes_merge_value(simd::load(o + r * Dp + j), a, simd::load(os + r * Dp + j), b));
    }
  }
  for (Index r = 0; r < R; ++r) {
    const Index t = r / G, h = g * G + r % G;
    const RowNormalization n = row_normalization(p, h, m[r], l[r]);
    float* orow = p.out.ptr(t, h);
    for (Index k = 0; k < d; ++k) orow[k] = lanes_output(o[r * Dp + k], n.inv);
    if (p.lse.rows() > 0) p.lse(t, h) = n.lse;
  }
}

}  // namespace inferkit::detail
