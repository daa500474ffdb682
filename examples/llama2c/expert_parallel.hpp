#pragma once
// Expert parallelism in the llama2.c runner (built only with MPI: INFERKIT_LLAMA2C_MPI). Under
// `mpirun -np N inferkit-llama2c generate --expert-parallel ...` on an MoE checkpoint
// (moe_model.hpp) every rank runs the same model on the same tokens, except the MoE FFNs: the E
// experts are split into contiguous ranges over the ranks, each rank takes a contiguous range of
// the chunk's tokens (a decode step's one token sits on rank 0), and inferkit's
// ExpertParallelExchange moves each token's rows to its experts' ranks and the outputs back.
// Routing and capacity are decided over the whole chunk (every rank computes them alike) and
// sliced per rank, and each expert sees all of its rows in token order, so every product has the
// single-process inputs and the ids equal the single-process run. The combined rows are then
// shared with MPI_Allgatherv so every rank continues with the whole residual stream.

#include <mpi.h>

#include <vector>

#include <inferkit/distributed/context_parallel.hpp>
#include <inferkit/distributed/expert_parallel.hpp>

#include "moe_model.hpp"

namespace llama2c {

inline int comm_size(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

/// The MoE FFN of every layer across the ranks of comm (file comment).
class ExpertParallelMoe final : public ExpertParallelHook {
 public:
  ExpertParallelMoe(MPI_Comm comm, Index num_experts)
      : comm_(comm), exchange_(comm, inferkit::ExpertPlacement::contiguous(num_experts, comm_size(comm))) {}

  void run(const inferkit::Routing& routing, const float* xb, float* x, Index n, Index dim, int num_threads,
           const ExpertFn& expert) const override {
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    const int ranks = comm_size(comm_);
    const auto shards = inferkit::contiguous_shards(n, ranks);  // token ranges, rank order
    const auto mine = shards[static_cast<std::size_t>(rank)];
    inferkit::routing_slice(routing, mine.first, mine.tokens, local_);
    plan_.build(local_);
    exchange_.run(plan_, inferkit::MatrixView<const float>(xb + mine.first * dim, mine.tokens, dim), expert,
                  inferkit::MatrixView<float>(x + mine.first * dim, mine.tokens, dim),
                  {.accumulate = true, .num_threads = num_threads});
    counts_.resize(static_cast<std::size_t>(ranks));
    displs_.resize(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      counts_[static_cast<std::size_t>(r)] = static_cast<int>(shards[static_cast<std::size_t>(r)].tokens * dim);
      displs_[static_cast<std::size_t>(r)] = static_cast<int>(shards[static_cast<std::size_t>(r)].first * dim);
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, x, counts_.data(), displs_.data(), MPI_FLOAT, comm_);
  }

 private:
  MPI_Comm comm_;
  mutable inferkit::ExpertParallelExchange exchange_;
  mutable inferkit::Routing local_;
  mutable inferkit::DispatchPlan plan_;
  mutable std::vector<int> counts_, displs_;
};

}  // namespace llama2c
