#pragma once
// A parallel loop over fixed work items that skips OpenMP entirely on one thread (an OpenMP
// region costs microseconds even when it runs serially, as much as a small matrix-vector
// product). Items are independent and each is computed the same way whatever the thread count.

#include "inferkit/core/view.hpp"

namespace inferkit::detail {

/// Calls body(i) for i in [0, n) on `threads` threads (static schedule), or serially.
template <class Body>
inline void parallel_items(int threads, Index n, const Body& body) {
  if (threads <= 1 || n <= 1) {
    for (Index i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (Index i = 0; i < n; ++i) body(i);
}

/// Like parallel_items, with per-thread state: make() is called once per thread, and
/// body(state, i) for each item.
template <class Make, class Body>
inline void parallel_items_with(int threads, Index n, const Make& make, const Body& body) {
  if (threads <= 1 || n <= 1) {
    auto state = make();
    for (Index i = 0; i < n; ++i) body(state, i);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    auto state = make();
#pragma omp for schedule(static)
    for (Index i = 0; i < n; ++i) body(state, i);
  }
}

}  // namespace inferkit::detail
