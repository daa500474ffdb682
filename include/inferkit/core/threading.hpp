#pragma once
// Thread-count helpers over OpenMP. Kernels take an explicit thread count (0 = OpenMP's
// default) and never change OpenMP's global settings. Work is always split by the problem
// shape, never by the thread count, so results do not depend on how many threads run.

#include <algorithm>
#include <cstddef>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace inferkit {

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
