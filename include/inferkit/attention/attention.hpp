#pragma once
// Public attention entry points.
//
//   attention(q, kv, out, lse, options)        one sequence: q [Tq, Hq, d] against a KV source
//                                              (every entry point also has a form without lse:
//                                              attention(q, kv, out, {.causal = false}))
//   attention_varlen(q, cu_q, k, v, cu_k, ...) a padding-free batch: sequences packed back to back
//   attention_batch(q, cu_q, sources, ...)     a serving batch: each sequence's queries against its
//                                              own KV source (paged block table, dense cache, ...)
//
// Exact softmax by tiles (FlashAttention-2); fp32 accumulation; memory independent of Tq * Tk.
// Up to kDecodeMaxQueries query tokens take the decode path, which splits the KV range into
// pieces (flash-decoding) merged exactly; longer queries take the prefill path, parallel over
// (KV head, query tile). Work is split by the problem's shape only, so the result does not
// depend on the thread count. Masks, positions, ALiBi and soft-capping: attention/options.hpp.
// With options.batch_invariant every row runs the prefill kernel over fixed key tiles and fixed
// KV splits instead, so its bits are also independent of the batch and of the chunking.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "inferkit/attention/alibi.hpp"
#include "inferkit/attention/dense_kv.hpp"
#include "inferkit/attention/detail/decode_kernel.hpp"
#include "inferkit/attention/detail/invariant_kernel.hpp"
#include "inferkit/attention/detail/prefill_kernel.hpp"
#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/gqa.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/options.hpp"
#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/threading.hpp"

namespace inferkit {

namespace detail {

/// Tokens per decode split: the explicit option, else enough splits for about 32 units in all
/// (so up to 16 threads stay busy) but never below 512 tokens per split.
inline Index decode_split_tokens(Index num_tokens, Index num_kv_heads, Index requested) {
  if (requested > 0) return requested;
  const Index splits = std::max<Index>(1, ceil_div<Index>(32, num_kv_heads));
  return std::max<Index>(512, ceil_div<Index>(std::max<Index>(num_tokens, 1), splits));
}

template <KvSource S>
struct SequenceTask {
  SequenceProblem problem;
  const S* kv = nullptr;  // outlives the call
};

struct WorkUnit {
  Index task = 0;
  Index kv_head = 0;
  Index begin = 0, end = 0;  // query tokens (prefill) or KV tokens (decode)
  Index split = -1;          // decode split index, -1 for prefill
};

struct DecodeLayout {
  Index task = 0, splits = 0, rows = 0, padded_rows = 0, padded_dim = 0;
  std::size_t offset = 0;  // into the partial buffers, in rows of padded_dim floats
};

/// Runs every task: prefill units write their output directly; decode units write partial states
/// that a second parallel pass merges in split order. In batch-invariant mode every unit runs
/// the lanes kernel: query tiles fold fixed KV splits in order themselves; short queries get one
/// unit per fixed split, folded in the same order afterwards (invariant_kernel.hpp).
template <KvSource S>
void run_attention(std::span<const SequenceTask<S>> tasks, Index num_kv_heads, const AttentionOptions& opt) {
  const bool invariant = opt.batch_invariant;
  const Index invariant_split = opt.kv_split_tokens > 0 ? opt.kv_split_tokens : kBatchInvariantSplitTokens;
  std::vector<WorkUnit> units;
  std::vector<DecodeLayout> decodes;
  std::size_t partial_rows = 0;
  for (Index i = 0; i < static_cast<Index>(tasks.size()); ++i) {
    const SequenceProblem& p = tasks[i].problem;
    const Index tq = p.num_queries();
    if (tq == 0) continue;
    if (tq <= kDecodeMaxQueries) {
      const Index tk = tasks[i].kv->num_tokens();
      const Index per = invariant ? invariant_split : decode_split_tokens(tk, num_kv_heads, opt.kv_split_tokens);
      const Index rows = tq * p.group;
      DecodeLayout lay{i,
                       std::max<Index>(1, ceil_div(tk, per)),
                       rows,
                       invariant ? lanes_padded_rows(rows) : decode_padded_rows(rows),
                       decode_padded_dim(p.head_dim()),
                       partial_rows};
      for (Index g = 0; g < num_kv_heads; ++g)
        for (Index s = 0; s < lay.splits; ++s) units.push_back({i, g, s * per, std::min(tk, (s + 1) * per), s});
      partial_rows += static_cast<std::size_t>(num_kv_heads * lay.splits * lay.padded_rows);
      decodes.push_back(lay);
    } else {
      const Index step = prefill_query_tokens(p.group);
      for (Index g = 0; g < num_kv_heads; ++g)
        for (Index t0 = 0; t0 < tq; t0 += step) units.push_back({i, g, t0, std::min(tq, t0 + step), -1});
    }
  }
  // Decode partials: o [rows x padded_dim], m and l [rows] per (task, head, split).
  std::size_t partial_floats = 0;
  for (const auto& lay : decodes)
    partial_floats += static_cast<std::size_t>(num_kv_heads * lay.splits * lay.padded_rows * lay.padded_dim);
  AlignedBuffer<float> part_o(partial_floats), part_m(partial_rows), part_l(partial_rows);
  std::vector<std::size_t> o_offset(decodes.size());
  {
    std::size_t acc = 0;
    for (std::size_t k = 0; k < decodes.size(); ++k) {
      o_offset[k] = acc;
      acc +=
          static_cast<std::size_t>(num_kv_heads * decodes[k].splits * decodes[k].padded_rows * decodes[k].padded_dim);
    }
  }
  std::vector<Index> decode_index(tasks.size(), -1);
  for (std::size_t k = 0; k < decodes.size(); ++k) decode_index[decodes[k].task] = static_cast<Index>(k);

  const int threads = resolve_threads(opt.num_threads);
  const auto n_units = static_cast<std::int64_t>(units.size());
#pragma omp parallel num_threads(threads) if (n_units > 1)
  {
    PrefillScratch pre;
    DecodeScratch dec;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t u = 0; u < n_units; ++u) {
      const WorkUnit& w = units[static_cast<std::size_t>(u)];
      const SequenceTask<S>& task = tasks[w.task];
      if (w.split < 0) {
        prefill_unit(task.problem, *task.kv, w.kv_head, w.begin, w.end, pre, invariant ? invariant_split : 0);
      } else {
        const auto k = static_cast<std::size_t>(decode_index[w.task]);
        const DecodeLayout& lay = decodes[k];
        const std::size_t slot = static_cast<std::size_t>(w.kv_head * lay.splits + w.split);
        float* o = part_o.data() + o_offset[k] + slot * lay.padded_rows * lay.padded_dim;
        float* m = part_m.data() + lay.offset + slot * lay.padded_rows;
        float* l = part_l.data() + lay.offset + slot * lay.padded_rows;
        if (invariant)
          invariant_split_unit(task.problem, *task.kv, w.kv_head, w.begin, w.end, pre, o, m, l);
        else
          decode_partial(task.problem, *task.kv, w.kv_head, w.begin, w.end, dec, o, m, l);
      }
    }

    // Merge decode partials in split order (exact; independent of the thread count).
    const auto n_merge = static_cast<std::int64_t>(decodes.size()) * num_kv_heads;
#pragma omp for schedule(static)
    for (std::int64_t u = 0; u < n_merge; ++u) {
      const auto k = static_cast<std::size_t>(u / num_kv_heads);
      const Index g = static_cast<Index>(u % num_kv_heads);
      const DecodeLayout& lay = decodes[k];
      const SequenceProblem& p = tasks[lay.task].problem;
      const Index d = p.head_dim(), Dp = lay.padded_dim, Rp = lay.padded_rows;
      if (invariant) {
        const std::size_t slot0 = static_cast<std::size_t>(g * lay.splits);
        pre.wa.resize(static_cast<std::size_t>(Rp));
        pre.wb.resize(static_cast<std::size_t>(Rp));
        invariant_fold_splits(p, g, lay.splits, Rp, Dp, part_o.data() + o_offset[k] + slot0 * Rp * Dp,
                              static_cast<std::size_t>(Rp * Dp), part_m.data() + lay.offset + slot0 * Rp,
                              part_l.data() + lay.offset + slot0 * Rp, pre.wa.data(), pre.wb.data());
        continue;
      }
      // Each split is normalized to (o, lse), exactly what attention() over its token range alone
      // returns, and the splits fold in order as merge_attention_states folds partials: so
      // merging per-shard attention() results in shard order (distributed/context_parallel.hpp)
      // reproduces these bits when every shard is one split. The running sum keeps relative
      // precision and the log is taken once, so many small splits lose nothing.
      for (Index r = 0; r < lay.rows; ++r) {
        const Index t = r / p.group, h = g * p.group + r % p.group;
        const std::span<float> out_row(p.out.ptr(t, h), static_cast<std::size_t>(d));
        std::fill(out_row.begin(), out_row.end(), 0.0f);
        SoftmaxStats total;
        for (Index s = 0; s < lay.splits; ++s) {
          const std::size_t slot = static_cast<std::size_t>(g * lay.splits + s);
          const std::span<float> o(part_o.data() + o_offset[k] + (slot * Rp + r) * Dp, static_cast<std::size_t>(d));
          const SoftmaxStats st{part_m[lay.offset + slot * Rp + r], part_l[lay.offset + slot * Rp + r]};
          const float lse_s = online_softmax_finish(st, o, o);
          online_softmax_merge(total, out_row, attention_state(lse_s), o);
        }
        if (p.sinks) {  // the sink joins once, after the splits (options.hpp)
          const float alpha = online_softmax_add_sink(total, p.sinks[h]);
          simd::scale(out_row.data(), out_row.size(), alpha);
        }
        const float lse = online_softmax_finish(total, out_row, out_row);
        if (p.lse.rows() > 0) p.lse(t, h) = lse;
      }
    }
  }
}

}  // namespace detail

/// Attention of one sequence's queries q [Tq, Hq, d] over every token of kv. Writes out
/// [Tq, Hq, d] and, when lse has rows, each row's natural-log log-sum-exp to lse [Tq, Hq]
/// (-inf for a fully masked row, whose output is zeros).
/// @param q    queries [Tq, Hq, d]
/// @param kv   any KvSource (DenseKv, a cache's source(layer), a block table's source)
/// @param out  output [Tq, Hq, d]
/// @param lse  optional [Tq, Hq] log-sum-exp (natural log), or an empty view
/// @param opt  attention options (attention/options.hpp)
/// @throws std::invalid_argument naming the parameter: shapes of q / out / lse, Hq not a multiple
///         of Hkv, query_positions.size() != Tq, bad options.
/// Thread-safety: reads q and kv, writes only out and lse; concurrent calls on distinct outputs
/// are safe.
template <KvSource S>
void attention(Tensor3View<const float> q, const S& kv, Tensor3View<float> out, MatrixView<float> lse = {},
               const AttentionOptions& opt = {}) {
  const detail::ProblemBuilder builder(q, out, lse, kv.num_kv_heads(), kv.head_dim(), opt);
  const detail::SequenceTask<S> task{builder.sequence(0, q.dim0(), last_position(kv)), &kv};
  detail::run_attention<S>(std::span<const detail::SequenceTask<S>>(&task, 1), kv.num_kv_heads(), opt);
}

/// attention() without the LSE output: `attention(q, kv, out, {.causal = false})`. Same
/// semantics, errors and thread-safety as the overload with lse.
template <KvSource S>
void attention(Tensor3View<const float> q, const S& kv, Tensor3View<float> out, const AttentionOptions& opt) {
  attention(q, kv, out, MatrixView<float>{}, opt);
}

/// Padding-free variable-length batch. Sequence b's queries are rows [cu_q[b], cu_q[b+1]) of
/// q [total_q, Hq, d] and its keys/values rows [cu_k[b], cu_k[b+1]) of k, v [total_k, Hkv, d]
/// (element type float, Float16 or BFloat16), at positions 0 .. len_k - 1; queries are
/// bottom-right aligned within each sequence unless options.query_positions (size total_q)
/// gives them. cu_q and cu_k are non-decreasing offsets starting at 0. A batch of mixed lengths
/// costs what its real tokens cost.
///
/// @param q     queries [total_q, Hq, d]
/// @param cu_q  batch + 1 non-decreasing query offsets, cu_q[0] = 0, cu_q.back() = total_q
/// @param k, v  keys and values [total_k, Hkv, d] (const or mutable views; T is deduced)
/// @param cu_k  batch + 1 non-decreasing key offsets, cu_k[0] = 0, cu_k.back() = total_k
/// @param out   output [total_q, Hq, d]
/// @param lse   optional [total_q, Hq] log-sum-exp (natural log), or an empty view
/// @param opt   attention options (attention/options.hpp)
/// @throws std::invalid_argument naming the parameter: offsets inconsistent with each other or
///         with q / k, shapes, Hq not a multiple of Hkv, bad options.
/// Thread-safety: reads q, k and v, writes only out and lse.
template <class T>
void attention_varlen(Tensor3View<const float> q, std::span<const std::int32_t> cu_q, Tensor3View<const T> k,
                      Tensor3View<const T> v, std::span<const std::int32_t> cu_k, Tensor3View<float> out,
                      MatrixView<float> lse = {}, const AttentionOptions& opt = {}) {
  require(cu_q.size() >= 1, "cu_q.size()", cu_q.size(), "must be >= 1 (batch + 1 offsets)");
  require(cu_k.size() == cu_q.size(), "cu_k.size()", cu_k.size(),
          "must equal cu_q.size() (" + std::to_string(cu_q.size()) + ")");
  const detail::ProblemBuilder builder(q, out, lse, k.dim1(), k.dim2(), opt);
  detail::validate_offsets(cu_q, "cu_q", q.dim0(), "q.dim0()");
  detail::validate_offsets(cu_k, "cu_k", k.dim0(), "k.dim0()");
  const Index batch = static_cast<Index>(cu_q.size()) - 1;
  std::vector<DenseKv<T>> sources;
  sources.reserve(static_cast<std::size_t>(batch));
  for (Index b = 0; b < batch; ++b)
    sources.emplace_back(k.slice0(cu_k[b], cu_k[b + 1] - cu_k[b]), v.slice0(cu_k[b], cu_k[b + 1] - cu_k[b]));
  std::vector<detail::SequenceTask<DenseKv<T>>> tasks;
  tasks.reserve(static_cast<std::size_t>(batch));
  for (Index b = 0; b < batch; ++b)
    tasks.push_back({builder.sequence(cu_q[b], cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b] - 1),
                     &sources[static_cast<std::size_t>(b)]});
  detail::run_attention<DenseKv<T>>(tasks, k.dim1(), opt);
}

/// attention_varlen() without the LSE output: `attention_varlen(q, cu_q, k, v, cu_k, out,
/// {.causal = false})`. Same semantics, errors and thread-safety.
template <class T>
void attention_varlen(Tensor3View<const float> q, std::span<const std::int32_t> cu_q, Tensor3View<const T> k,
                      Tensor3View<const T> v, std::span<const std::int32_t> cu_k, Tensor3View<float> out,
                      const AttentionOptions& opt) {
  attention_varlen<T>(q, cu_q, k, v, cu_k, out, MatrixView<float>{}, opt);
}

/// attention_varlen() over mutable key / value views (Tensor3View<float>, ...): deduces the
/// element type that the const overload cannot deduce from a non-const view.
template <class K, class V>
requires(std::is_same_v<std::remove_const_t<K>, std::remove_const_t<V>> &&
         !(std::is_const_v<K> &&
           std::is_const_v<V>)) void attention_varlen(Tensor3View<const float> q, std::span<const std::int32_t> cu_q,
                                                      Tensor3View<K> k, Tensor3View<V> v,
                                                      std::span<const std::int32_t> cu_k, Tensor3View<float> out,
                                                      MatrixView<float> lse = {}, const AttentionOptions& opt = {}) {
  using T = std::remove_const_t<K>;
  attention_varlen<T>(q, cu_q, Tensor3View<const T>(k), Tensor3View<const T>(v), cu_k, out, lse, opt);
}

/// attention_varlen() over mutable key / value views, without the LSE output.
template <class K, class V>
requires(std::is_same_v<std::remove_const_t<K>, std::remove_const_t<V>> &&
         !(std::is_const_v<K> &&
           std::is_const_v<V>)) void attention_varlen(Tensor3View<const float> q, std::span<const std::int32_t> cu_q,
                                                      Tensor3View<K> k, Tensor3View<V> v,
                                                      std::span<const std::int32_t> cu_k, Tensor3View<float> out,
                                                      const AttentionOptions& opt) {
  using T = std::remove_const_t<K>;
  attention_varlen<T>(q, cu_q, Tensor3View<const T>(k), Tensor3View<const T>(v), cu_k, out, MatrixView<float>{}, opt);
}

/// Query offsets of a batch: a contiguous range (std::vector, std::span, std::array) of
/// std::int32_t or Index (std::ptrdiff_t, as serving's BatchPlan::cu_q holds them).
template <class Offsets>
concept QueryOffsets = std::ranges::contiguous_range<const Offsets&> && std::ranges::sized_range<const Offsets&> &&
    (std::is_same_v<std::ranges::range_value_t<Offsets>, std::int32_t> ||
     std::is_same_v<std::ranges::range_value_t<Offsets>, Index>);

/// KV sources of a batch: a contiguous range of one KvSource type.
template <class Sources>
concept KvSourceRange = std::ranges::contiguous_range<const Sources&> && std::ranges::sized_range<const Sources&> &&
    KvSource<std::ranges::range_value_t<Sources>>;

/// Attention of a batch whose sequences each bring their own KV source, in one parallel pass:
/// the attention step of continuous batching, where one iteration runs prefill chunks of some
/// sequences and decode rows (1 token, or k + 1 for speculative verification) of others.
///
/// Sequence b's queries are rows [cu_q[b], cu_q[b+1]) of q [total_q, Hq, d] (packed back to
/// back, as in attention_varlen); they attend every token of kv[b] (whose K/V for these queries
/// the caller has already appended). Without options.query_positions (size total_q) the
/// queries are bottom-right aligned to their sequence's cached tokens: with keys at positions
/// 0 .. n-1, a chunk of c queries sits at n - c .. n - 1, so a prefill chunk starts where the
/// tokens cached before it end. A sequence may have no queries or no cached tokens (its rows
/// are then fully masked: zeros, LSE -inf). Writes out [total_q, Hq, d] and, when lse has rows,
/// each row's natural-log LSE to lse [total_q, Hq]. Every option of attention() applies (GQA,
/// ALiBi, sliding window, soft-cap, explicit positions, threads, batch_invariant: with it a
/// row's bits are those it gets alone, in any other batch, chunking or thread count).
///
/// `kv` is a contiguous range (std::vector, std::span, std::array) of one KvSource type, e.g.
/// BlockTable<T>::Source (kv/block_table.hpp), DenseKv<T>, or any cache's source(layer); all
/// sources have the same num_kv_heads() and head_dim(). Sequences of different source types need
/// one call per type. Each sequence runs as attention() would run it alone (decode rows split
/// the KV range, flash-decoding; longer chunks tile the queries), and all sequences' work units
/// share one parallel pass, so the call costs what its real tokens cost, whatever the mix.
///
/// @param q     queries [total_q, Hq, d]
/// @param cu_q  batch + 1 non-decreasing query offsets, cu_q[0] = 0, cu_q.back() = total_q
///              (std::int32_t or Index elements: QueryOffsets)
/// @param kv    one KV source per sequence (cu_q.size() - 1 of them); read only
/// @param out   output [total_q, Hq, d]
/// @param lse   optional [total_q, Hq] log-sum-exp (natural log), or an empty view
/// @param opt   attention options (attention/options.hpp)
/// @throws std::invalid_argument naming the parameter: cu_q inconsistent with kv.size() or
///         q.dim0(), sources disagreeing on num_kv_heads() / head_dim(), Hq not a multiple of
///         Hkv, shapes of q / out / lse, query_positions.size() != total_q, bad options.
/// Thread-safety: reads q and the sources, writes only out and lse; concurrent calls on
/// distinct outputs are safe.
template <class Offsets, class Sources>
requires QueryOffsets<Offsets> && KvSourceRange<Sources>
void attention_batch(Tensor3View<const float> q, const Offsets& cu_q, const Sources& kv, Tensor3View<float> out,
                     MatrixView<float> lse = {}, const AttentionOptions& opt = {}) {
  using I = std::ranges::range_value_t<Offsets>;
  using S = std::ranges::range_value_t<Sources>;
  const std::span<const I> cu(std::ranges::data(cu_q), std::ranges::size(cu_q));
  const std::span<const S> sources(std::ranges::data(kv), std::ranges::size(kv));
  const auto batch = static_cast<Index>(sources.size());
  require(static_cast<Index>(cu.size()) == batch + 1, "cu_q.size()", cu.size(),
          "must equal the number of KV sources + 1 (" + std::to_string(batch + 1) + ")");
  const Index hkv = batch > 0 ? sources[0].num_kv_heads() : q.dim1();
  const Index head_dim = batch > 0 ? sources[0].head_dim() : q.dim2();
  for (Index b = 1; b < batch; ++b) {
    const S& s = sources[static_cast<std::size_t>(b)];
    require(s.num_kv_heads() == hkv, "kv[" + std::to_string(b) + "].num_kv_heads()", s.num_kv_heads(),
            "must equal kv[0].num_kv_heads() (" + std::to_string(hkv) + ")");
    require(s.head_dim() == head_dim, "kv[" + std::to_string(b) + "].head_dim()", s.head_dim(),
            "must equal kv[0].head_dim() (" + std::to_string(head_dim) + ")");
  }
  const detail::ProblemBuilder builder(q, out, lse, hkv, head_dim, opt);
  detail::validate_offsets(cu, "cu_q", q.dim0(), "q.dim0()");
  std::vector<detail::SequenceTask<S>> tasks;
  tasks.reserve(static_cast<std::size_t>(batch));
  for (Index b = 0; b < batch; ++b) {
    const S& s = sources[static_cast<std::size_t>(b)];
    tasks.push_back({builder.sequence(cu[b], cu[b + 1] - cu[b], last_position(s)), &s});
  }
  detail::run_attention<S>(tasks, hkv, opt);
}

/// attention_batch() without the LSE output:
/// `attention_batch(q, cu_q, sources, out, {.batch_invariant = true})`. Same semantics, errors
/// and thread-safety.
template <class Offsets, class Sources>
requires QueryOffsets<Offsets> && KvSourceRange<Sources>
void attention_batch(Tensor3View<const float> q, const Offsets& cu_q, const Sources& kv, Tensor3View<float> out,
                     const AttentionOptions& opt) {
  attention_batch(q, cu_q, kv, out, MatrixView<float>{}, opt);
}

}  // namespace inferkit
