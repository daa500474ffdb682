#pragma once
// Expert parallelism over MPI (GShard, Lepikhin et al. 2020; DeepSpeed-MoE): the E experts of an
// MoE layer are placed on the ranks of a communicator (contiguous ranges or any explicit
// placement). Every rank routes its own tokens (moe/router.hpp, capacity.hpp) and builds its
// DispatchPlan; one call of ExpertParallelExchange::run then
//   1. dispatches the rank's token rows into the expert-contiguous buffer (moe/dispatch.hpp),
//   2. exchanges per-expert row counts, then the rows, with MPI_Alltoallv,
//   3. runs each local expert once over all rows it received from every rank (the caller's
//      callback: one matrix-matrix product per expert), rows ordered by source rank and, within a
//      rank, by that rank's token order,
//   4. returns the outputs to their source ranks with a second MPI_Alltoallv, and
//   5. combines them into the rank's token outputs with moe's combine(), whose per-token sum runs
//      over the token's slots in slot order.
// A token's output therefore depends only on its own slots, weights and expert output rows: it
// is bitwise the single-process result (route all tokens in one process, one product per
// expert, combine) whenever the expert callback computes each row independently of the other
// rows in its call (a per-row fixed-order product; a blocked GEMM whose blocking depends on the
// row count may change bits), and the routing of each token is the same (routing is per token;
// capacity limits are per call, so use dropless routing, or a capacity decided globally, for
// equality with one process).

#include "inferkit/distributed/mpi.hpp"  // first: stops with a clear #error without MPI

#include <algorithm>
#include <cstdint>
#include <exception>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"
#include "inferkit/moe/dispatch.hpp"

namespace inferkit {

/// Which rank holds each expert.
class ExpertPlacement {
 public:
  /// Contiguous ranges in rank order, as even as possible: rank r holds experts
  /// [r E / n + min(r, E mod n) ...) (the first E mod n ranks one more); with E < n the last
  /// ranks hold none.
  /// @throws std::invalid_argument for num_experts < 1 or ranks < 1.
  static ExpertPlacement contiguous(Index num_experts, int ranks) {
    require(num_experts >= 1, "num_experts", num_experts, "must be >= 1");
    require(ranks >= 1, "ranks", ranks, "must be >= 1");
    std::vector<int> owner(static_cast<std::size_t>(num_experts));
    const Index base = num_experts / ranks, extra = num_experts % ranks;
    Index e = 0;
    for (int r = 0; r < ranks; ++r)
      for (Index i = 0; i < base + (r < extra ? 1 : 0); ++i) owner[static_cast<std::size_t>(e++)] = r;
    return ExpertPlacement(std::move(owner), ranks);
  }

  /// Explicit placement: expert e lives on rank owner[e]. A rank may hold no expert.
  /// @throws std::invalid_argument for an empty owner list, ranks < 1, or an owner outside [0, ranks).
  ExpertPlacement(std::vector<int> owner, int ranks) : owner_(std::move(owner)), ranks_(ranks) {
    require(!owner_.empty(), "owner.size()", owner_.size(), "must be >= 1 (one entry per expert)");
    require(ranks >= 1, "ranks", ranks, "must be >= 1");
    local_.assign(static_cast<std::size_t>(ranks), {});
    for (std::size_t e = 0; e < owner_.size(); ++e) {
      require(owner_[e] >= 0 && owner_[e] < ranks, "owner[" + std::to_string(e) + "]", owner_[e],
              "must be a rank in [0, " + std::to_string(ranks) + ")");
      local_[static_cast<std::size_t>(owner_[e])].push_back(static_cast<Index>(e));
      if (e > 0 && owner_[e] < owner_[e - 1]) ordered_ = false;
    }
  }

  /// Number of experts E.
  Index num_experts() const { return static_cast<Index>(owner_.size()); }
  /// Number of ranks the placement is for.
  int num_ranks() const { return ranks_; }
  /// Rank holding expert e.
  int owner(Index e) const { return owner_[static_cast<std::size_t>(e)]; }
  /// Experts held by rank r, in increasing id.
  std::span<const Index> local_experts(int r) const { return local_[static_cast<std::size_t>(r)]; }
  /// Whether owners never decrease with the expert id (contiguous ranges in rank order): then each
  /// rank's rows of a dispatch buffer are one block and need no reordering before sending.
  bool ordered() const { return ordered_; }

 private:
  std::vector<int> owner_;
  int ranks_ = 1;
  std::vector<std::vector<Index>> local_;
  bool ordered_ = true;
};

/// The routing of tokens [first, first + count) of `routing`, renumbered from 0, into `out`
/// (reused): a rank's share of a routing decided over the whole batch. Routing, and above all
/// capacity (which tokens compete for an expert), decided once over all tokens and then sliced
/// gives every rank the slots one process would use, so the expert-parallel result equals the
/// single-process one bitwise even when capacity drops assignments. mean_probability and
/// z_loss are copied (they describe the whole batch).
/// @throws std::invalid_argument when the range is not inside [0, routing.num_tokens].
inline void routing_slice(const Routing& routing, Index first, Index count, Routing& out) {
  require(first >= 0 && count >= 0 && first + count <= routing.num_tokens, "first + count", first + count,
          "must lie in [0, routing.num_tokens = " + std::to_string(routing.num_tokens) + "] with first, count >= 0");
  out.num_tokens = count;
  out.num_experts = routing.num_experts;
  out.top_k = routing.top_k;
  const Index s0 = routing.token_offsets[static_cast<std::size_t>(first)];
  const Index s1 = routing.token_offsets[static_cast<std::size_t>(first + count)];
  out.token_offsets.resize(static_cast<std::size_t>(count) + 1);
  for (Index t = 0; t <= count; ++t)
    out.token_offsets[static_cast<std::size_t>(t)] = routing.token_offsets[static_cast<std::size_t>(first + t)] - s0;
  out.expert_ids.assign(routing.expert_ids.begin() + s0, routing.expert_ids.begin() + s1);
  out.weights.assign(routing.weights.begin() + s0, routing.weights.begin() + s1);
  out.mean_probability = routing.mean_probability;
  out.z_loss = routing.z_loss;
}

/// Rows moved by the last ExpertParallelExchange::run on this rank.
struct ExpertExchangeStats {
  Index rows_sent = 0;       ///< dispatch rows sent (to every rank, this one included)
  Index rows_received = 0;   ///< rows this rank's experts processed
  Index rows_to_others = 0;  ///< of rows_sent, those that left this rank
  double bytes_moved = 0;    ///< bytes this rank sent in both all-to-alls (rows to others only)
};

/// The expert-parallel layer call over one communicator (file comment). Holds the exchange
/// buffers, so repeated calls of similar size allocate nothing. Not thread-safe; one object per
/// communicator and thread.
class ExpertParallelExchange {
 public:
  /// @param comm       the ranks sharing the experts (not duplicated; must outlive the object)
  /// @param placement  expert placement for comm's size
  /// @throws std::invalid_argument when placement.num_ranks() differs from comm's size.
  ExpertParallelExchange(MPI_Comm comm, ExpertPlacement placement)
      : comm_(comm), placement_(std::move(placement)), size_(detail::mpi_size(comm)), rank_(detail::mpi_rank(comm)) {
    require(placement_.num_ranks() == size_, "placement.num_ranks()", placement_.num_ranks(),
            "must equal the communicator's size (" + std::to_string(size_) + ")");
  }

  /// The placement.
  const ExpertPlacement& placement() const { return placement_; }

  /// One MoE layer call for this rank's tokens (collective over the communicator).
  ///
  /// @param plan      DispatchPlan of this rank's routing (num_experts = the placement's E)
  /// @param tokens    this rank's token rows [T_r, D] (T_r = plan.num_tokens(); may be 0)
  /// @param expert    callback `expert(Index e, MatrixView<const float> in, MatrixView<float> out)`
  ///                  called once per local expert that received rows: in [n_e, D] are its rows
  ///                  (by source rank, then that rank's token order), out [n_e, out_dim] its
  ///                  outputs to fill. It may throw: the exception is rethrown on this rank and
  ///                  the others throw std::runtime_error naming the rank, before the return
  ///                  exchange.
  /// @param out       token outputs [T_r, out_dim], combined as moe's combine() does
  /// @param opt       combine options (accumulate into out; threads for dispatch / combine)
  /// @throws std::invalid_argument on every rank when any rank's shapes are invalid or ranks
  ///         disagree on D, out_dim or E; MpiError when MPI reports an error.
  template <class F>
  requires std::is_invocable_v<F&, Index, MatrixView<const float>, MatrixView<float>>
  void run(const DispatchPlan& plan, MatrixView<const float> tokens, F&& expert, MatrixView<float> out,
           CombineOptions opt = {}) {
    const Index D = tokens.cols(), Dout = out.cols(), E = placement_.num_experts();
    detail::validate_collectively(comm_, "ExpertParallelExchange::run", [&] {
      require(plan.num_experts() == E, "plan.num_experts()", plan.num_experts(),
              "must equal the placement's num_experts (" + std::to_string(E) + ")");
      require(tokens.rows() == plan.num_tokens(), "tokens.rows()", tokens.rows(),
              "must equal plan.num_tokens() (" + std::to_string(plan.num_tokens()) + ")");
      require(out.rows() == plan.num_tokens(), "out.rows()", out.rows(),
              "must equal plan.num_tokens() (" + std::to_string(plan.num_tokens()) + ")");
      require(D >= 1, "tokens.cols()", D, "must be >= 1");
      require(Dout >= 1, "out.cols()", Dout, "must be >= 1");
    });
    {
      const std::int64_t mine[6] = {D, Dout, E, -D, -Dout, -E};
      std::int64_t maxed[6];
      detail::mpi_check(MPI_Allreduce(mine, maxed, 6, MPI_INT64_T, MPI_MAX, comm_), "MPI_Allreduce");
      require(maxed[0] == -maxed[3], "tokens.cols()", maxed[0],
              "differs across ranks: every rank must pass the same D");
      require(maxed[1] == -maxed[4], "out.cols()", maxed[1],
              "differs across ranks: every rank must pass the same out_dim");
      require(maxed[2] == -maxed[5], "placement.num_experts()", maxed[2],
              "differs across ranks: every rank must use the same placement");
    }
    const auto n = static_cast<std::size_t>(size_);
    const auto local = placement_.local_experts(rank_);
    const auto L = static_cast<Index>(local.size());

    // 1. Dispatch, in send order (destination rank, then expert id); the plan's order when the
    //    placement is ordered.
    rows_.resize(static_cast<std::size_t>(plan.num_rows() * D));
    dispatch(plan, tokens, MatrixView<float>(rows_.data(), plan.num_rows(), D), opt.num_threads);
    const float* send = rows_.data();
    send_count_.assign(n, 0);
    send_counts_by_expert_.clear();
    send_displ_.assign(n, 0);
    for (int q = 0; q < size_; ++q)
      for (const Index e : placement_.local_experts(q)) {
        send_counts_by_expert_.push_back(detail::mpi_count(plan.expert_rows(e), "rows per expert"));
        send_count_[static_cast<std::size_t>(q)] += send_counts_by_expert_.back();
      }
    displacements(send_count_, send_displ_);
    if (!placement_.ordered()) {
      send_.resize(rows_.size());
      for (int q = 0; q < size_; ++q) {
        Index at = send_displ_[static_cast<std::size_t>(q)];
        for (const Index e : placement_.local_experts(q)) {
          copy_rows(send_.data() + at * D, rows_.data() + plan.expert_begin(e) * D, plan.expert_rows(e), D);
          at += plan.expert_rows(e);
        }
      }
      send = send_.data();
    }

    // 2. Counts (per local expert of the destination), then rows.
    std::vector<int>& ccount = scratch_int_[0];
    std::vector<int>& cdispl = scratch_int_[1];
    std::vector<int>& rcount = scratch_int_[2];
    std::vector<int>& rdispl = scratch_int_[3];
    ccount.assign(n, 0);
    cdispl.assign(n, 0);
    for (int q = 0; q < size_; ++q)
      ccount[static_cast<std::size_t>(q)] = static_cast<int>(placement_.local_experts(q).size());
    displacements(ccount, cdispl);
    recv_counts_by_expert_.assign(n * static_cast<std::size_t>(L), 0);  // [source][local expert]
    std::vector<int>& lcount = scratch_int_[4];
    std::vector<int>& ldispl = scratch_int_[5];
    lcount.assign(n, static_cast<int>(L));
    ldispl.assign(n, 0);
    displacements(lcount, ldispl);
    detail::mpi_check(MPI_Alltoallv(send_counts_by_expert_.data(), ccount.data(), cdispl.data(), MPI_INT,
                                    recv_counts_by_expert_.data(), lcount.data(), ldispl.data(), MPI_INT, comm_),
                      "MPI_Alltoallv");
    rcount.assign(n, 0);
    rdispl.assign(n, 0);
    for (std::size_t p = 0; p < n; ++p)
      for (Index j = 0; j < L; ++j)
        rcount[p] += recv_counts_by_expert_[p * static_cast<std::size_t>(L) + static_cast<std::size_t>(j)];
    displacements(rcount, rdispl);
    const Index received = rdispl.empty() ? 0 : rdispl.back() + rcount.back();
    recv_.resize(static_cast<std::size_t>(received * D));
    {
      RowType in_row(D);
      detail::mpi_check(MPI_Alltoallv(send, send_count_.data(), send_displ_.data(), in_row.type, recv_.data(),
                                      rcount.data(), rdispl.data(), in_row.type, comm_),
                        "MPI_Alltoallv");
    }

    // 3. Expert-major input (expert j: rows from source 0, 1, ...), one callback per expert.
    expert_base_.assign(static_cast<std::size_t>(L) + 1, 0);
    for (Index j = 0; j < L; ++j) {
      Index rows_j = 0;
      for (std::size_t p = 0; p < n; ++p)
        rows_j += recv_counts_by_expert_[p * static_cast<std::size_t>(L) + static_cast<std::size_t>(j)];
      expert_base_[static_cast<std::size_t>(j) + 1] = expert_base_[static_cast<std::size_t>(j)] + rows_j;
    }
    ein_.resize(recv_.size());
    eout_.resize(static_cast<std::size_t>(received * Dout));
    permute_received(recv_.data(), ein_.data(), rdispl, L, D, true);
    std::exception_ptr failed;
    try {
      for (Index j = 0; j < L; ++j) {
        const Index b = expert_base_[static_cast<std::size_t>(j)],
                    rows_j = expert_base_[static_cast<std::size_t>(j) + 1] - b;
        if (rows_j == 0) continue;
        expert(local[static_cast<std::size_t>(j)], MatrixView<const float>(ein_.data() + b * D, rows_j, D),
               MatrixView<float>(eout_.data() + b * Dout, rows_j, Dout));
      }
    } catch (...) {
      failed = std::current_exception();
    }
    {
      const int mine = failed ? rank_ : size_;
      int first = size_;
      detail::mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
      if (failed) std::rethrow_exception(failed);
      if (first < size_)
        throw std::runtime_error("inferkit: ExpertParallelExchange::run: the expert callback threw on rank " +
                                 std::to_string(first));
    }

    // 4. Outputs back to their sources (source-major again), returned in send order.
    back_.resize(eout_.size());
    permute_received(eout_.data(), back_.data(), rdispl, L, Dout, false);
    const Index sent = send_displ_.back() + send_count_.back();
    ret_.resize(static_cast<std::size_t>(sent * Dout));
    {
      RowType out_row(Dout);
      detail::mpi_check(MPI_Alltoallv(back_.data(), rcount.data(), rdispl.data(), out_row.type, ret_.data(),
                                      send_count_.data(), send_displ_.data(), out_row.type, comm_),
                        "MPI_Alltoallv");
    }

    // 5. Plan order, then combine.
    const float* expert_out = ret_.data();
    if (!placement_.ordered()) {
      planned_.resize(ret_.size());
      for (int q = 0; q < size_; ++q) {
        Index at = send_displ_[static_cast<std::size_t>(q)];
        for (const Index e : placement_.local_experts(q)) {
          copy_rows(planned_.data() + plan.expert_begin(e) * Dout, ret_.data() + at * Dout, plan.expert_rows(e), Dout);
          at += plan.expert_rows(e);
        }
      }
      expert_out = planned_.data();
    }
    combine(plan, MatrixView<const float>(expert_out, plan.num_rows(), Dout), out, opt);

    stats_.rows_sent = sent;
    stats_.rows_received = received;
    stats_.rows_to_others = sent - send_count_[static_cast<std::size_t>(rank_)];
    stats_.bytes_moved = static_cast<double>(stats_.rows_to_others) * static_cast<double>(D + Dout) * sizeof(float);
  }

  /// What the last run() moved on this rank.
  const ExpertExchangeStats& last_stats() const { return stats_; }

 private:
  // A committed MPI datatype of one row of `cols` floats (counts in rows, so large exchanges do
  // not overflow MPI's int counts).
  struct RowType {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    explicit RowType(Index cols) {
      detail::mpi_check(MPI_Type_contiguous(detail::mpi_count(cols, "row width"), MPI_FLOAT, &type),
                        "MPI_Type_contiguous");
      detail::mpi_check(MPI_Type_commit(&type), "MPI_Type_commit");
    }
    ~RowType() { MPI_Type_free(&type); }
    RowType(const RowType&) = delete;
    RowType& operator=(const RowType&) = delete;
  };

  static void displacements(const std::vector<int>& count, std::vector<int>& displ) {
    std::int64_t acc = 0;
    for (std::size_t i = 0; i < count.size(); ++i) {
      displ[i] = detail::mpi_count(acc, "rows exchanged with the ranks before");
      acc += count[i];
    }
    detail::mpi_count(acc, "rows exchanged");
  }

  static void copy_rows(float* dst, const float* src, Index rows, Index cols) {
    if (rows > 0) detail::copy_row(dst, src, static_cast<std::size_t>(rows * cols));
  }

  // Between source-major (as received: source p's rows for local expert 0, 1, ...) and
  // expert-major (expert j's rows from source 0, 1, ...) layouts; to_expert picks the direction.
  void permute_received(const float* from, float* to, const std::vector<int>& rdispl, Index L, Index cols,
                        bool to_expert) {
    const auto n = static_cast<std::size_t>(size_);
    cursor_.assign(expert_base_.begin(), expert_base_.end() - 1);
    for (std::size_t p = 0; p < n; ++p) {
      Index at = rdispl[p];
      for (Index j = 0; j < L; ++j) {
        const Index c = recv_counts_by_expert_[p * static_cast<std::size_t>(L) + static_cast<std::size_t>(j)];
        Index& dst = cursor_[static_cast<std::size_t>(j)];
        if (to_expert)
          copy_rows(to + dst * cols, from + at * cols, c, cols);
        else
          copy_rows(to + at * cols, from + dst * cols, c, cols);
        dst += c;
        at += c;
      }
    }
  }

  MPI_Comm comm_;
  ExpertPlacement placement_;
  int size_ = 1, rank_ = 0;
  std::vector<float> rows_, send_, recv_, ein_, eout_, back_, ret_, planned_;
  std::vector<int> send_count_, send_displ_, send_counts_by_expert_, recv_counts_by_expert_;
  std::vector<int> scratch_int_[6];
  std::vector<Index> expert_base_, cursor_;
  ExpertExchangeStats stats_;
};

}  // namespace inferkit
