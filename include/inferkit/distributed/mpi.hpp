#pragma once
// What the MPI layer (include/inferkit/distributed/) shares: the guard that makes these headers
// refuse to compile without MPI, MPI error checking, and the collective agreement on argument
// errors. inferkit's core target never needs MPI; link inferkit::distributed (CMake:
// find_package(inferkit COMPONENTS distributed), or the in-tree target) to use these headers.
//
// Collectives and exceptions: a rank that throws before a collective call would leave the other
// ranks waiting in it forever. So every entry point validates its local arguments first and then
// agrees with the other ranks (one MPI_Allreduce) on whether any rank rejected its arguments;
// if one did, every rank throws (the rejecting rank its own error, the others an error naming
// that rank), and no rank enters the data exchange.

#if !__has_include(<mpi.h>)
#error \
    "inferkit/distributed/ needs MPI: install libopenmpi-dev (scripts/setup.sh) and link inferkit::distributed (find_package(inferkit COMPONENTS distributed))"
#endif

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "inferkit/core/error.hpp"
#include "inferkit/core/view.hpp"

namespace inferkit {

/// Thrown when an MPI call returns an error code (only with an error handler that returns,
/// e.g. MPI_ERRORS_RETURN; MPI's default handler aborts the job instead).
class MpiError : public std::runtime_error {
 public:
  /// @param call  the MPI function that failed
  /// @param code  its return code
  MpiError(const std::string& call, int code) : std::runtime_error(describe(call, code)), code_(code) {}
  /// The MPI error code.
  int code() const { return code_; }

 private:
  static std::string describe(const std::string& call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    return "inferkit: " + call + " failed (MPI error " + std::to_string(code) +
           (len > 0 ? ": " + std::string(text, static_cast<std::size_t>(len)) : std::string()) + ")";
  }
  int code_;
};

namespace detail {

/// Throws MpiError unless rc is MPI_SUCCESS.
inline void mpi_check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) [[unlikely]]
    throw MpiError(call, rc);
}

inline int mpi_rank(MPI_Comm comm) {
  int r = 0;
  mpi_check(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
  return r;
}

inline int mpi_size(MPI_Comm comm) {
  int n = 0;
  mpi_check(MPI_Comm_size(comm, &n), "MPI_Comm_size");
  return n;
}

/// An element count as MPI's int, or an error naming what is too large.
inline int mpi_count(std::int64_t n, const char* what) {
  require(n >= 0 && n <= INT_MAX, what, n, "must fit an MPI count (int); exchange fewer rows per call");
  return static_cast<int>(n);
}

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else
    static_assert(sizeof(T) == 0, "no MPI datatype for this type");
}

/// Runs `validate` (which throws on bad local arguments), then agrees with every rank of comm:
/// if any rank's validation threw, every rank throws (its own exception, or
/// std::invalid_argument naming the lowest rank that rejected its arguments). Collective.
template <class F>
void validate_collectively(MPI_Comm comm, const char* function, F&& validate) {
  std::exception_ptr local;
  try {
    validate();
  } catch (...) {
    local = std::current_exception();
  }
  const int size = mpi_size(comm), rank = mpi_rank(comm);
  const int mine = local ? rank : size;
  int first_bad = size;
  mpi_check(MPI_Allreduce(&mine, &first_bad, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (local) std::rethrow_exception(local);
  if (first_bad < size)
    throw_invalid_argument("rank", first_bad,
                           std::string("rejected its arguments to ") + function + " (that rank's exception says why)");
}

}  // namespace detail
}  // namespace inferkit
