#pragma once
// Parallel regions sized to their work. On a busy machine an OpenMP region with two threads
// waits at its barrier for whichever thread the OS descheduled, so a region of a few microseconds
// of work can take a scheduler time slice: `serve` on stories260K (dim 64) took 52 s with two
// threads where one took 11 s (wall, same run, a loaded 2-core machine; OMP_WAIT_POLICY=passive),
// every matmul of 64 x 64 and every attention call being a region. Regions whose work is below
// kParallelMinFlops run on one thread; larger ones on the runner's thread count.
//
//   llama2c::set_runner_threads(2);                               // --threads 2
//   llama2c::eigen_threads_for(2.0 * rows * in * out);            // then y.noalias() = x * W^T
//   ao.num_threads = llama2c::threads_for(attention_flops);

#include <Eigen/Core>

#include <cstdlib>

#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace llama2c {

/// Below this many flops a parallel region runs on one thread. Where it comes from: a 2-thread
/// OpenMP fork/join measured ~6 us idle on the 2-core Xeon (OMP_WAIT_POLICY=passive), far more
/// when a thread is descheduled, against ~0.1-0.3 ms for 2^21 flops on one core; checked by
/// `serve` on stories260K (2 threads now as fast as 1) and by `bench` on a TinyLlama-shaped model
/// (its matmuls, ~10^8 flops and up, keep every thread). Not yet a sweep over cut-overs.
inline constexpr double kParallelMinFlops = double(1 << 21);

/// The runner's thread count: 0 = OpenMP's default.
inline int& runner_threads() {
  static int threads = 0;
  return threads;
}

/// Sets the runner's thread count (0 = OpenMP's default) for OpenMP and Eigen.
inline void set_runner_threads(int threads) {
  runner_threads() = threads;
  Eigen::setNbThreads(threads);
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads(threads);
#endif
}

/// Threads for a region of `flops` work: 1 below kParallelMinFlops, else the runner's count.
inline int threads_for(double flops) { return flops < kParallelMinFlops ? 1 : runner_threads(); }

/// Sets Eigen's thread count for the next product of `flops` work (threads_for()).
inline void eigen_threads_for(double flops) { Eigen::setNbThreads(threads_for(flops)); }

/// Makes idle OpenMP threads sleep instead of spin: when OMP_WAIT_POLICY is unset, sets it to
/// `passive` and re-executes the program (argv) so the runtime sees it; returns if it is set
/// already or the re-exec fails. Why: libgomp's default spins an idle thread between parallel
/// regions and at barriers, and on a machine where other processes run, the spinning thread
/// takes the CPU time the working one needs. Measured (same run, 2-core Xeon at load 12,
/// TinyLlama-shaped F16, pp64 on 2 threads): 7.1 tokens/s spinning, 14.6 passive. libgomp reads
/// the variable once, when it is loaded (before main()), hence the re-exec; a user's own
/// OMP_WAIT_POLICY is kept.
inline void use_passive_omp_wait(char** argv) {
#ifdef _OPENMP
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: run on with the default policy
#else
  (void)argv;
#endif
}

}  // namespace llama2c
