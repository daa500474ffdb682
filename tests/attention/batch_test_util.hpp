#pragma once
// Helpers for batched-attention tests: a pool of paged sequences filled with random K/V, a packed
// query batch over them, and the per-sequence fp64 reference of a batch.

#include <memory>
#include <vector>

#include "attention/attention_test_util.hpp"
#include "inferkit/kv/block_pool.hpp"
#include "inferkit/kv/block_table.hpp"

namespace test {

/// Paged sequences of one layer in one pool; sequence s holds the tokens appended to tables[s].
template <class T = float>
struct PagedBatch {
  Index hkv, d;
  std::unique_ptr<inferkit::BlockPool<T>> pool;
  std::vector<inferkit::BlockTable<T>> tables;

  PagedBatch(Index kv_heads, Index head_dim, Index page, Index max_blocks)
      : hkv(kv_heads),
        d(head_dim),
        pool(std::make_unique<inferkit::BlockPool<T>>(
            inferkit::BlockPoolConfig{1, kv_heads, head_dim, page, max_blocks})) {}

  /// A new empty sequence; returns its index.
  std::size_t add() {
    tables.emplace_back(*pool);
    return tables.size() - 1;
  }
  /// A fork of sequence s sharing all its blocks; returns its index.
  std::size_t fork(std::size_t s) {
    tables.push_back(tables[s]);
    return tables.size() - 1;
  }
  /// Appends n tokens of random K/V to sequence s, in uneven pieces (as chunks would arrive).
  void append(std::size_t s, Index n, std::uint32_t seed) {
    const auto k = random_normal(static_cast<std::size_t>(n * hkv * d), seed);
    const auto v = random_normal(static_cast<std::size_t>(n * hkv * d), seed + 7777);
    for (Index t = 0; t < n;) {
      const Index piece = std::min<Index>(n - t, 1 + (t * 13 + static_cast<Index>(seed)) % 37);
      REQUIRE(tables[s].reserve(piece));
      tables[s].write(0, {k.data() + t * hkv * d, piece, hkv, d}, {v.data() + t * hkv * d, piece, hkv, d});
      tables[s].commit(piece);
      t += piece;
    }
  }
  std::vector<typename inferkit::BlockTable<T>::Source> sources() const {
    std::vector<typename inferkit::BlockTable<T>::Source> out;
    for (const auto& t : tables) out.push_back(t.source(0));
    return out;
  }
};

/// Offsets of packed query counts.
inline std::vector<std::int32_t> offsets(const std::vector<Index>& counts) {
  std::vector<std::int32_t> cu{0};
  for (Index c : counts) cu.push_back(cu.back() + static_cast<std::int32_t>(c));
  return cu;
}

/// The fp64 reference of a batch: sequence b's rows against sources[b] alone (positions, when
/// given, are the packed batch's).
template <class Source>
Result reference_batch(const std::vector<float>& q, Index hq, Index d, const std::vector<std::int32_t>& cu,
                       const std::vector<Source>& sources, inferkit::AttentionOptions opt) {
  const Index total = cu.back();
  Result r{std::vector<float>(static_cast<std::size_t>(total * hq * d)),
           std::vector<float>(static_cast<std::size_t>(total * hq))};
  const std::span<const std::int32_t> all_pos = opt.query_positions;
  inferkit::Tensor3View<const float> qv(q.data(), total, hq, d);
  inferkit::Tensor3View<float> ov(r.out.data(), total, hq, d);
  inferkit::MatrixView<float> lv(r.lse.data(), total, hq);
  for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
    const Index q0 = cu[b], nq = cu[b + 1] - cu[b];
    if (!all_pos.empty())
      opt.query_positions = all_pos.subspan(static_cast<std::size_t>(q0), static_cast<std::size_t>(nq));
    inferkit::attention_reference(qv.slice0(q0, nq), sources[b], ov.slice0(q0, nq), lv.rows_slice(q0, nq), opt);
  }
  return r;
}

}  // namespace test
