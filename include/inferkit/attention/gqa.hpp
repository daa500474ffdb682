#pragma once
// Grouped-query attention head mapping (Ainslie et al. 2023): query head h reads KV head
// h / (Hq / Hkv). MHA (Hq == Hkv) and MQA (Hkv == 1) are the same mapping. Kernels process the
// `group_size` query heads of one KV head together so each K/V tile is read once per group.

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Query-head to KV-head mapping of grouped-query attention (file comment).
class HeadGroups {
 public:
  /// @throws std::invalid_argument when a count is <= 0 or num_q_heads is not a multiple of num_kv_heads.
  HeadGroups(Index num_q_heads, Index num_kv_heads) : hq_(num_q_heads), hkv_(num_kv_heads) {
    require(num_q_heads > 0, "num_q_heads", num_q_heads, "must be > 0");
    require(num_kv_heads > 0, "num_kv_heads", num_kv_heads, "must be > 0");
    require(num_q_heads % num_kv_heads == 0, "num_q_heads", num_q_heads,
            "must be a multiple of num_kv_heads (" + std::to_string(num_kv_heads) + ")");
  }

  Index num_q_heads() const { return hq_; }    ///< query heads
  Index num_kv_heads() const { return hkv_; }  ///< KV heads
  /// Query heads per KV head.
  Index group_size() const { return hq_ / hkv_; }
  /// The KV head query head h reads.
  Index kv_head(Index q_head) const { return q_head / group_size(); }
  /// The first query head of KV head g's group.
  Index first_q_head(Index kv_head) const { return kv_head * group_size(); }

 private:
  Index hq_;
  Index hkv_;
};

}  // namespace inferkit
