#pragma once
// Helpers for the MPI tests: this process's rank and the communicator size, and comparisons of a
// result across ranks (every rank must hold the same bits).

#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstring>
#include <vector>

namespace test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// Whether every rank's `v` has the bits of rank 0's (collective; the answer is the same on
/// every rank).
inline bool same_bits_on_every_rank(const std::vector<float>& v) {
  std::vector<float> root = v;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int mine = std::memcmp(root.data(), v.data(), v.size() * sizeof(float)) == 0 ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

}  // namespace test
