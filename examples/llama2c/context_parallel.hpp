#pragma once
// Context parallelism in the llama2.c runner (built only with MPI: INFERKIT_LLAMA2C_MPI). Under
// `mpirun -np N inferkit-llama2c generate --context-parallel ...` every rank runs the same model
// on the same tokens, but each stores the K/V of one token range only: rank r holds positions
// [r S, (r + 1) S) and the last rank everything from (N - 1) S on (S = --cp-shard-tokens, default
// ceil(seq_len / N)). Every attention call goes through inferkit::context_parallel_attention,
// whose result is the same on every rank, so every rank samples the same ids; rank 0 prints them.

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include <inferkit/distributed/context_parallel.hpp>

#include "llama2c.hpp"

namespace llama2c {

/// This rank's shard of the sequence and the context-parallel attention over all shards.
class ContextParallelShard final : public ShardedAttention {
 public:
  /// @param comm          every rank of the run
  /// @param shard_tokens  positions per rank (the last rank takes the rest); > 0
  ContextParallelShard(MPI_Comm comm, std::int32_t shard_tokens) : comm_(comm) {
    if (shard_tokens <= 0) throw std::invalid_argument("--cp-shard-tokens must be >= 1");
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const std::int64_t first = std::int64_t{rank} * shard_tokens;
    first_ = static_cast<std::int32_t>(std::min<std::int64_t>(first, std::numeric_limits<std::int32_t>::max()));
    end_ = rank + 1 == size ? std::numeric_limits<std::int32_t>::max()
                            : static_cast<std::int32_t>(std::min<std::int64_t>(
                                  first + shard_tokens, std::numeric_limits<std::int32_t>::max()));
  }
  std::int32_t first() const override { return first_; }
  std::int32_t end() const override { return end_; }
  void attend(inferkit::Tensor3View<const float> q, const inferkit::ShiftedKv<inferkit::DenseKv<float>>& shard,
              inferkit::Tensor3View<float> out) const override {
    inferkit::context_parallel_attention(comm_, q, shard, out);
  }

 private:
  MPI_Comm comm_;
  std::int32_t first_ = 0, end_ = 0;
};

}  // namespace llama2c
