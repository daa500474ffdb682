#pragma once
// Context-parallel attention over MPI: a sequence whose KV cache does not fit one process is
// sharded by token ranges across the ranks of a communicator. Every rank holds the same query
// rows (replicated by the caller, or sent with broadcast_queries), attends them over its own
// shard with attention() and its LSE output, and the partial (o, lse) pairs of all ranks are
// gathered (MPI_Allgather) and merged in rank order with merge_attention_states
// (core/online_softmax.hpp, the overload over n partials): the exact softmax over the union of
// the shards, folded as attention() folds its split-KV pieces. Every rank gets the same bits.
//
// Positions are global: each rank's source presents its tokens at their positions in the whole
// sequence (a cache that numbers from 0 goes through ShiftedKv, attention/shifted_kv.hpp), so
// causal masks, windows and ALiBi see the whole sequence; without options.query_positions the
// queries are bottom-right aligned to the last position held by any rank, as attention() aligns
// them to its source's last token. A rank may hold no tokens (its partial is empty: LSE -inf).
//
// Bits: the result equals attention() over all tokens within float rounding. It is bitwise equal
// for decode rows (at most 8 query tokens) when every shard is exactly one split of that
// attention() call: with kv_split_tokens = S on both sides, rank r holding tokens
// [r S, (r + 1) S) (the last shard may be shorter, trailing ranks may be empty), since
// attention() normalizes each split to (o, lse) and folds the splits in order exactly as that
// merge does (attention.hpp, run_attention).

#include "inferkit/distributed/mpi.hpp"  // first: stops with a clear #error without MPI

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inferkit/attention/attention.hpp"
#include "inferkit/attention/detail/problem.hpp"
#include "inferkit/attention/kv_block.hpp"
#include "inferkit/attention/options.hpp"
#include "inferkit/attention/shifted_kv.hpp"
#include "inferkit/core/error.hpp"
#include "inferkit/core/online_softmax.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// A contiguous token range [first, first + tokens) of a sequence, held by one rank.
struct KvShard {
  Index first = 0;   ///< global index (and position) of the range's first token
  Index tokens = 0;  ///< tokens in the range (may be 0)
};

/// Shards `num_tokens` tokens over `ranks` ranks in rank order: every shard but the last
/// non-empty one holds `s` tokens, s = ceil(num_tokens / ranks) rounded up to a multiple of
/// `align` (align = the split size S gives the bitwise layout of the file comment); trailing
/// ranks may be empty.
/// @throws std::invalid_argument for num_tokens < 0, ranks < 1 or align < 1.
inline std::vector<KvShard> contiguous_shards(Index num_tokens, int ranks, Index align = 1) {
  require(num_tokens >= 0, "num_tokens", num_tokens, "must be >= 0");
  require(ranks >= 1, "ranks", ranks, "must be >= 1");
  require(align >= 1, "align", align, "must be >= 1");
  const Index per = ceil_div<Index>(std::max<Index>(ceil_div<Index>(num_tokens, ranks), 1), align) * align;
  std::vector<KvShard> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const Index a = std::min(num_tokens, r * per), b = std::min(num_tokens, (r + 1) * per);
    out[static_cast<std::size_t>(r)] = {a, b - a};
  }
  return out;
}

namespace detail {

// Shape entries every rank must agree on, reduced with MAX as (value, -value) pairs.
enum CpAgree : int { kCpTq, kCpHq, kCpD, kCpHkv, kCpPos, kCpFields };

inline void cp_check_agreement(const std::int64_t* maxed, const char* const* names) {
  for (int f = 0; f < kCpFields; ++f) {
    const std::int64_t hi = maxed[1 + f], lo = -maxed[1 + kCpFields + f];
    require(hi == lo, names[f], hi,
            "differs across ranks (from " + std::to_string(lo) + " to " + std::to_string(hi) +
                "): every rank must pass the same query shape");
  }
}

}  // namespace detail

/// Copies root's queries q [Tq, Hq, d] into q on every other rank of comm (MPI_Bcast; strided
/// views are packed). Collective: every rank passes a view of the same shape.
/// @throws std::invalid_argument on every rank when the shapes differ or root is not a rank.
inline void broadcast_queries(MPI_Comm comm, Tensor3View<float> q, int root = 0) {
  const int size = detail::mpi_size(comm);
  detail::validate_collectively(comm, "broadcast_queries", [&] {
    require(root >= 0 && root < size, "root", root, "must be a rank of comm [0, " + std::to_string(size) + ")");
  });
  const std::int64_t mine[6] = {q.dim0(), q.dim1(), q.dim2(), -q.dim0(), -q.dim1(), -q.dim2()};
  std::int64_t maxed[6];
  detail::mpi_check(MPI_Allreduce(mine, maxed, 6, MPI_INT64_T, MPI_MAX, comm), "MPI_Allreduce");
  const char* names[3] = {"q.dim0()", "q.dim1()", "q.dim2()"};
  for (int f = 0; f < 3; ++f)
    require(maxed[f] == -maxed[3 + f], names[f], maxed[f], "differs across ranks: every rank must pass the same shape");
  const Index tq = q.dim0(), hq = q.dim1(), d = q.dim2();
  const int count = detail::mpi_count(tq * hq * d, "q.size()");
  if (count == 0) return;
  if (q.stride1() == d && q.stride0() == hq * d) {
    detail::mpi_check(MPI_Bcast(q.data(), count, MPI_FLOAT, root, comm), "MPI_Bcast");
    return;
  }
  std::vector<float> packed(static_cast<std::size_t>(count));
  for (Index t = 0; t < tq; ++t)
    for (Index h = 0; h < hq; ++h) std::copy_n(q.ptr(t, h), d, packed.data() + (t * hq + h) * d);
  detail::mpi_check(MPI_Bcast(packed.data(), count, MPI_FLOAT, root, comm), "MPI_Bcast");
  for (Index t = 0; t < tq; ++t)
    for (Index h = 0; h < hq; ++h) std::copy_n(packed.data() + (t * hq + h) * d, d, q.ptr(t, h));
}

/// Context-parallel attention (file comment): the query rows q [Tq, Hq, d], the same on every
/// rank of comm, against the union of every rank's local_kv, whose tokens carry their global
/// positions (wrap a cache numbered from 0 in ShiftedKv). Writes out [Tq, Hq, d] and, when lse
/// has rows, the natural-log LSE [Tq, Hq] on every rank, identical across ranks.
///
/// @param comm      the ranks sharing the sequence; rank order is the merge order
/// @param q         queries, identical on every rank (see broadcast_queries)
/// @param local_kv  this rank's shard: any KvSource (dense, quantized, paged, ...), possibly empty
/// @param out       output [Tq, Hq, d]
/// @param lse       optional [Tq, Hq] log-sum-exp, or an empty view
/// @param opt       attention() options, the same on every rank; query_positions, if given, are
///                  global positions; kv_split_tokens applies to each rank's local attention;
///                  sink_logits enter once (through rank 0's partial)
/// @throws std::invalid_argument on every rank when any rank's arguments are invalid (that rank
///         throws attention()'s own error, the others one naming that rank) or when the ranks
///         disagree on Tq, Hq, d, the KV heads or whether query_positions is given; MpiError
///         when MPI reports an error (with an error handler that returns).
/// Collective over comm: every rank calls it with the same shapes and options. Thread-safety:
/// as attention() on this rank; concurrent calls on one communicator must not overlap.
template <KvSource S>
void context_parallel_attention(MPI_Comm comm, Tensor3View<const float> q, const S& local_kv, Tensor3View<float> out,
                                MatrixView<float> lse = {}, const AttentionOptions& opt = {}) {
  const Index tq = q.dim0(), hq = q.dim1(), d = q.dim2(), hkv = local_kv.num_kv_heads();
  detail::validate_collectively(comm, "context_parallel_attention", [&] {
    const detail::ProblemBuilder check(q, out, lse, hkv, local_kv.head_dim(), opt);
  });
  // One reduction: the global last position (the bottom-right anchor) and the shape agreement.
  using namespace detail;
  std::int64_t mine[1 + 2 * kCpFields], maxed[1 + 2 * kCpFields];
  const std::int64_t fields[kCpFields] = {tq, hq, d, hkv, opt.query_positions.empty() ? 0 : 1};
  mine[0] = last_position(local_kv);
  for (int f = 0; f < kCpFields; ++f) {
    mine[1 + f] = fields[f];
    mine[1 + kCpFields + f] = -fields[f];
  }
  mpi_check(MPI_Allreduce(mine, maxed, 1 + 2 * kCpFields, MPI_INT64_T, MPI_MAX, comm), "MPI_Allreduce");
  const char* names[kCpFields] = {"q.dim0()", "q.dim1()", "q.dim2()", "local_kv.num_kv_heads()",
                                  "query_positions given"};
  cp_check_agreement(maxed, names);

  // This rank's partial over its shard, at global query positions, into a packed (o, lse) buffer.
  AttentionOptions local = opt;
  // Sink logits join the denominator once: rank 0's partial carries them, and since a partial's
  // LSE includes its sink (attention/options.hpp) the rank-order merge is exact.
  if (mpi_rank(comm) != 0) local.sink_logits = {};
  std::vector<std::int32_t> positions;
  if (opt.query_positions.empty()) {
    positions.resize(static_cast<std::size_t>(tq));
    for (Index i = 0; i < tq; ++i)
      positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(maxed[0] - (tq - 1 - i));
    local.query_positions = positions;
  }
  const Index o_floats = tq * hq * d, part_floats = o_floats + tq * hq;
  const int count = mpi_count(part_floats, "q.dim0() * q.dim1() * (q.dim2() + 1)");
  const int ranks = mpi_size(comm);
  std::vector<float> send(static_cast<std::size_t>(part_floats)), recv(static_cast<std::size_t>(part_floats) * ranks);
  attention(q, local_kv, Tensor3View<float>(send.data(), tq, hq, d), MatrixView<float>(send.data() + o_floats, tq, hq),
            local);
  if (count > 0)
    mpi_check(MPI_Allgather(send.data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, comm), "MPI_Allgather");

  // Merge in rank order (the order attention() folds its splits in).
  std::vector<Tensor3View<const float>> parts_o;
  std::vector<MatrixView<const float>> parts_lse;
  for (int r = 0; r < ranks; ++r) {
    const float* base = recv.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(part_floats);
    parts_o.emplace_back(base, tq, hq, d);
    parts_lse.emplace_back(base + o_floats, tq, hq);
  }
  merge_attention_states(parts_o, parts_lse, out, lse);
}

}  // namespace inferkit
