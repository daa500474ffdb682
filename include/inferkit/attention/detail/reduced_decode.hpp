#pragma once
// The reduced-precision decode arithmetic (AttentionArithmetic::kReduced; the rules are in
// options.hpp, the error bounds in docs/design.md, "Reduced-precision decode arithmetic"): which
// arithmetic a tile of a KV block takes, by the block's row encoding and this build.
//   q.k, per-token quantized keys: the query rounded to int8 per key group; q^ . k by
//     vpdpbusd (reduced_int8_scores.hpp) where AVX-512 VNNI is compiled in, else by the exact
//     kernel on q^ (the same sum in fp32).
//   q.k, bf16 keys: the query rounded to bf16; q^ . k by vdpbf16ps (reduced_bf16.hpp) or the
//     exact kernel (bf16 x bf16 products are exact in fp32 either way).
//   p.v, per-token values of 8 or 4 bits: 15-bit integer weights, vpdpwssd
//     (reduced_int16_pv.hpp), AVX-512 VNNI only.
//   p.v, bf16 values: p rounded to bf16; vdpbf16ps (reduced_bf16.hpp), else the exact kernel.
// Per-channel (KIVI) keys, f32 / f16 caches, 2-bit values and non-VNNI p.v stay exact. What the
// arithmetics share (scratch, rounding, the rounded query): reduced_common.hpp.
//
//   const float* qk = reduced_query(blk.keys, q, Rp, Dp, d, rs);
//   if (!reduced_scores(blk.keys, c0, nc, d, Rp, st, rs)) /* exact kernel with qk */;
//
// Contract: reduced_scores / reduced_pv return false (and change nothing) when the caller must
// run the exact kernel instead; fold_reduced_pv adds what integer p.v accumulated apart.

#include <cstdint>
#include <type_traits>
#include <utility>

#include "inferkit/attention/detail/reduced_bf16.hpp"
#include "inferkit/attention/detail/reduced_common.hpp"
#include "inferkit/attention/detail/reduced_int16_pv.hpp"
#include "inferkit/attention/detail/reduced_int8_scores.hpp"
#include "inferkit/attention/detail/row_readers.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/half.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit::detail {

/// Whether a row store holds plain bf16 rows.
template <class Rows>
constexpr bool bf16_rows() {
  if constexpr (requires(const Rows& r) { r.direct_rows(); })
    return std::is_same_v<std::remove_cvref_t<decltype(*std::declval<const Rows&>().direct_rows())>, BFloat16>;
  else
    return false;
}

/// The query the reduced arithmetic multiplies a store's keys with: q rounded to int8 per key
/// group (per-token quantized keys) or to bf16 (bf16 keys), else q itself (round_query,
/// reduced_common.hpp).
template <class Rows>
const float* reduced_query(const Rows& keys, const float* q, Index Rp, Index Dp, Index d, ReducedScratch& rs) {
  QueryRoundingKey key;
  if constexpr (QuantizedRows<Rows>) {
    const QuantRowsView v = keys.quantized_view();
    if (!v.per_channel) key = {QueryRounding::kInt8, v.group_size, v.bits};
  } else if constexpr (bf16_rows<Rows>()) {
    key = {QueryRounding::kBf16, 0, 16};
  }
  if (key.kind == QueryRounding::kNone) return q;
  if (!rs.have_query || !(rs.key == key)) round_query(q, Rp, Dp, d, key, rs);
  return rs.qhat.data();
}

/// S^T of a tile by integer (reduced_int8_scores.hpp) or bf16 (reduced_bf16.hpp) dot products
/// where the keys allow; false if the caller must run the float kernel (with the rounded query).
template <class Rows>
bool reduced_scores(const Rows& keys, Index c0, Index nc, Index d, Index Rp, float* st, ReducedScratch& rs) {
#if INFERKIT_DETAIL_REDUCED_VNNI
  if constexpr (QuantizedRows<Rows> && kReducedVnni) {
    const QuantRowsView v = keys.quantized_view();
    if (c0 + nc > v.tokens || !vnni_scores_apply(v, d) || rs.key.kind != QueryRounding::kInt8) return false;
    if (v.bits == 8)
      vnni_scores<8>(v, c0, nc, d, rs, Rp, st, rs);
    else
      vnni_scores<4>(v, c0, nc, d, rs, Rp, st, rs);
    return true;
  }
#endif
#if INFERKIT_DETAIL_REDUCED_BF16
  if constexpr (bf16_rows<Rows>() && kReducedBf16) {
    if (d % 32 != 0 || rs.key.kind != QueryRounding::kBf16) return false;
    alignas(64) float lanes[16];
    bf16_scores(keys.direct_rows() + c0 * keys.row_stride, keys.row_stride, nc, rs, Rp, d, st, lanes);
    return true;
  }
#endif
  (void)keys, (void)c0, (void)nc, (void)d, (void)Rp, (void)st, (void)rs;
  return false;
}

/// o = o * alpha + P V of a tile by integer or bf16 dot products where the values allow; false
/// if the caller must run the float kernel.
template <class Rows>
bool reduced_pv(const Rows& values, Index c0, Index nc, Index d, const float* st, Index Rp, Index R, const float* alpha,
                float* o, Index Dp, ReducedScratch& rs) {
#if INFERKIT_DETAIL_REDUCED_VNNI
  if constexpr (QuantizedRows<Rows> && kReducedVnni) {
    const QuantRowsView v = values.quantized_view();
    if (c0 + nc > v.tokens || !vnni_pv_apply(v, d)) return false;
    const Index groups = d / v.group_size;
    if (!rs.perm_touched) {
      rs.o_perm.resize(static_cast<std::size_t>(R * d));
      rs.o_perm.fill(0.0f);
      rs.zacc.resize(static_cast<std::size_t>(R * groups * 16));
      rs.zacc.fill(0.0f);
      rs.perm_groups = groups;
      rs.perm_bits = v.bits;
      rs.perm_touched = true;
    } else if (rs.perm_groups != groups || rs.perm_bits != v.bits) {
      return false;
    }
    if (rs.nat_touched)
      for (Index r = 0; r < R; ++r)
        for (Index j = 0; j < Dp; ++j) o[r * Dp + j] *= alpha[r];
    if (v.bits == 8)
      vnni_pv<8>(v, c0, nc, d, st, Rp, R, alpha, rs);
    else
      vnni_pv<4>(v, c0, nc, d, st, Rp, R, alpha, rs);
    return true;
  }
#endif
#if INFERKIT_DETAIL_REDUCED_BF16
  if constexpr (bf16_rows<Rows>() && kReducedBf16) {
    if (d % 64 != 0 || rs.perm_touched) return false;  // (bf16 values never have integer accumulators)
    bf16_pv(values.direct_rows() + c0 * values.row_stride, values.row_stride, nc, st, Rp, R, alpha, o, d, rs);
    rs.nat_touched = true;
    return true;
  }
#endif
  (void)values, (void)c0, (void)nc, (void)d, (void)st, (void)Rp, (void)R, (void)alpha, (void)o, (void)Dp, (void)rs;
  return false;
}

/// Before a tile's o = o * alpha + P V runs in the exact kernel (the values allow no reduced
/// p.v): integer p.v accumulators of earlier tiles take the tile's rescale alpha too, and over
/// bf16 values p is rounded to bf16 (what vdpbf16ps would multiply).
template <class Rows>
void reduced_before_exact_pv(const Rows&, float* st, Index nc, Index Rp, Index R, Index d, const float* alpha,
                             ReducedScratch& rs) {
  if (rs.perm_touched) {
    for (Index r = 0; r < R; ++r) {
      for (Index j = 0; j < d; ++j) rs.o_perm[static_cast<std::size_t>(r * d + j)] *= alpha[r];
      for (Index j = 0; j < rs.perm_groups * 16; ++j)
        rs.zacc[static_cast<std::size_t>(r * rs.perm_groups * 16 + j)] *= alpha[r];
    }
  }
  if (bf16_rows<Rows>()) round_bf16_inplace(st, nc * Rp);
  rs.nat_touched = true;
}

}  // namespace inferkit::detail
