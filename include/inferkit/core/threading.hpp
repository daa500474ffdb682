#pragma once
// Thread-count helpers over OpenMP. Kernels take an explicit thread count (0 = OpenMP's
// default) and never change OpenMP's global settings. Work is always split by the problem
// shape, never by the thread count, so results do not depend on how many threads run.

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "inferkit/core/error.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace inferkit {

/// The largest thread count any inferkit entry point accepts. OpenMP runtimes fail (or crash:
/// libgomp at 65535) long before memory does when asked for tens of thousands of threads, and
/// no CPU inferkit targets has more than a few hundred hardware threads.
inline constexpr int kMaxThreads = 1024;

/// Checks a caller's thread count: 0 (OpenMP's default) or 1..kMaxThreads. Throws
/// std::invalid_argument naming `parameter`, the value and the bound.
inline void require_thread_count(std::string_view parameter, long long value) {
  require(value >= 0 && value <= kMaxThreads, parameter, value,
          "must be 0 (OpenMP's default) or 1.." + std::to_string(kMaxThreads));
}

/// Threads a parallel region will use for a requested count (0 = OpenMP's default).
inline int resolve_threads(int requested) {
#if defined(_OPENMP)
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

/// Ceiling division for non-negative integers.
template <class I>
constexpr I ceil_div(I a, I b) {
  return (a + b - 1) / b;
}

}  // namespace inferkit
