#pragma once
// A parallel loop over fixed work items that skips OpenMP entirely on one thread (an OpenMP
// region costs microseconds even when it runs serially, as much as a small matrix-vector
// product). Items are independent and each is computed the same way whatever the thread count.
//
// Items are handed out dynamically, in chunks of about 1/16 of a thread's share: on a machine
// where other processes run, the OS deschedules one thread for milliseconds at a time, and a
// static split then leaves the other thread waiting at the barrier with its half done (a
// TinyLlama-shaped F16 prefill of 64 tokens on 2 threads of a 2-core Xeon at load 9-10, three
// interleaved runs each: 7.7-11.6 tokens/s static, mean 9.2; 8.0-13.8 dynamic, mean 11.4).
// Which thread runs an item never changes its result: items write only their own outputs.

#include "inferkit/core/view.hpp"

namespace inferkit::detail {

/// Items per dynamic chunk: about 16 chunks per thread (few enough that taking one costs
/// nothing beside an item's work, enough to even out a thread that lost the CPU).
inline Index chunk_items(int threads, Index n) { return n / (Index{16} * threads) > 1 ? n / (Index{16} * threads) : 1; }

/// Calls body(i) for i in [0, n) on `threads` threads (dynamic chunks), or serially.
template <class Body>
inline void parallel_items(int threads, Index n, const Body& body) {
  if (threads <= 1 || n <= 1) {
    for (Index i = 0; i < n; ++i) body(i);
    return;
  }
  const Index chunk = chunk_items(threads, n);
#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads)
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
  const Index chunk = chunk_items(threads, n);
#pragma omp parallel num_threads(threads)
  {
    auto state = make();
#pragma omp for schedule(dynamic, chunk)
    for (Index i = 0; i < n; ++i) body(state, i);
  }
}

}  // namespace inferkit::detail
