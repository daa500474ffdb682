#pragma once
// Reading back what a KV source holds: one KV head's keys and values as float rows, exactly as
// the attention kernels see them (dequantized, 16-bit widened, RoPE-rotated on read by a
// sink + window cache with cache positions), plus each token's position. Works on any KvSource:
// DenseKv, a cache's source(layer), a block table's source. For inspection, tests and export;
// not a fast path (attention never materializes a whole head).

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "inferkit/attention/kv_block.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Copies KV head `head` of `kv` into `keys` and `values` ([kv.num_tokens(), kv.head_dim()]
/// each, token order of the source) and, when given, each token's position into `positions`
/// (size kv.num_tokens()). Pass a default-constructed view (or an empty span) to skip an output.
/// Rows are the float values attention reads: quantized rows dequantized, Float16 / BFloat16
/// widened, rotated keys rotated.
/// @param kv         any KvSource
/// @param head       KV head in [0, kv.num_kv_heads())
/// @param keys       output [num_tokens, head_dim] (any row stride >= head_dim), or MatrixView<float>{}
/// @param values     output [num_tokens, head_dim], or MatrixView<float>{}
/// @param positions  output of num_tokens positions, or {}
/// @returns the number of tokens copied (kv.num_tokens())
/// @throws std::out_of_range for a bad head; std::invalid_argument naming the output whose shape
///         is wrong.
/// Thread-safety: reads kv only; safe concurrently with other readers.
template <KvSource S>
Index copy_kv_head(const S& kv, Index head, MatrixView<float> keys, MatrixView<float> values,
                   std::span<std::int32_t> positions = {}) {
  require_index(head, kv.num_kv_heads(), "head");
  const Index n = kv.num_tokens(), d = kv.head_dim();
  const auto check = [&](const MatrixView<float>& m, const char* name) {
    if (m.rows() == 0 && m.cols() == 0) return false;  // skipped
    require(m.rows() == n, std::string(name) + ".rows()", m.rows(),
            "must equal kv.num_tokens() (" + std::to_string(n) + ")");
    require(m.cols() == d, std::string(name) + ".cols()", m.cols(),
            "must equal kv.head_dim() (" + std::to_string(d) + ")");
    return true;
  };
  const bool want_k = check(keys, "keys"), want_v = check(values, "values");
  const bool want_pos = !positions.empty();
  if (want_pos)
    require(static_cast<Index>(positions.size()) == n, "positions.size()", positions.size(),
            "must equal kv.num_tokens() (" + std::to_string(n) + ") or be empty");
  // Decode each block straight into the output rows (allow_in_place = false: a store asked for
  // scratch writes there); a store that still answers in place is copied.
  const auto load = [d](const auto& rows, Index count, MatrixView<float> out, Index at) {
    float* dst = out.row_ptr(at);
    const RowsF32 r = rows.load_f32(0, count, d, dst, out.row_stride(), false);
    if (r.data != dst)
      for (Index i = 0; i < count; ++i)
        std::memcpy(dst + i * out.row_stride(), r.data + i * r.stride, static_cast<std::size_t>(d) * sizeof(float));
  };
  Index at = 0;
  for (Index b = 0; b < kv.num_blocks(); ++b) {
    const auto blk = kv.block(head, b);
    const Index count = blk.num_tokens;
    if (count == 0) continue;
    require(at + count <= n, "kv.block(" + std::to_string(head) + ", " + std::to_string(b) + ").num_tokens", count,
            "overruns kv.num_tokens() (" + std::to_string(n) + ")");
    if (want_k) load(blk.keys, count, keys, at);
    if (want_v) load(blk.values, count, values, at);
    if (want_pos)
      for (Index i = 0; i < count; ++i) positions[static_cast<std::size_t>(at + i)] = blk.positions[i];
    at += count;
  }
  require(at == n, "kv blocks' tokens", at, "must add up to kv.num_tokens() (" + std::to_string(n) + ")");
  return n;
}

}  // namespace inferkit
