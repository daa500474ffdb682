#pragma once
// Helpers for KV cache tests.

#include <algorithm>
#include <vector>

#include "inferkit/attention/kv_block.hpp"

namespace test {

/// Every token of a KV source as float rows [tokens, kv_heads, head_dim], read block by block
/// through the row stores' load_f32 (the decoded values attention sees).
template <class Source>
void dequantized_rows(const Source& src, std::vector<float>& k, std::vector<float>& v) {
  const inferkit::Index n = src.num_tokens(), h = src.num_kv_heads(), d = src.head_dim();
  k.assign(static_cast<std::size_t>(n * h * d), 0);
  v = k;
  std::vector<float> scratch(static_cast<std::size_t>(n * d));
  for (inferkit::Index head = 0; head < h; ++head) {
    inferkit::Index t0 = 0;
    for (inferkit::Index b = 0; b < src.num_blocks(); ++b) {
      const auto blk = src.block(head, b);
      const auto kr = blk.keys.load_f32(0, blk.num_tokens, d, scratch.data(), d, false);
      for (inferkit::Index t = 0; t < blk.num_tokens; ++t)
        std::copy_n(kr.data + t * kr.stride, d, k.begin() + ((t0 + t) * h + head) * d);
      const auto vr = blk.values.load_f32(0, blk.num_tokens, d, scratch.data(), d, false);
      for (inferkit::Index t = 0; t < blk.num_tokens; ++t)
        std::copy_n(vr.data + t * vr.stride, d, v.begin() + ((t0 + t) * h + head) * d);
      t0 += blk.num_tokens;
    }
  }
}

}  // namespace test
