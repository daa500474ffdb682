// The MPI layer (distributed/), run under mpirun (built only with MPI):
//   OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np 2
//       build/release/bench/inferkit-bench-distributed  (one command line)
// Every rank runs the same benchmarks with the same fixed iteration counts (they are collective);
// an iteration's time is the slowest rank's (barrier, run, MPI_Allreduce of the elapsed time), and
// only rank 0 reports.
//   distributed/inferkit/ep_exchange_T<T>_D<D>_E<E>_k<k>: ExpertParallelExchange::run with an
//       identity expert: dispatch, counts and rows all-to-all, expert-major reordering, results
//       all-to-all, combine. T tokens per rank, experts split contiguously, dropless top-k.
//   distributed/mpi_alltoallv/ep_exchange_...: the two MPI_Alltoallv calls alone on the same row
//       counts (buffers ready, counts known): what the exchange costs in MPI.
//       Counter GBps: bytes that left their rank (both directions, all ranks) per second; the
//       same byte count for both, so the ratio is the time ratio.
//   distributed/single/cp_decode_Tk<T>_Hq32_Hkv8_D128: one decode row attending T dense f32
//       tokens in one process (rank 0, 1 thread; the other ranks wait).
//   distributed/inferkit/cp_decode_...: context_parallel_attention, each rank holding T / ranks
//       tokens (1 thread each). Counters us, GBps of KV bytes (all ranks together).
#include <benchmark/benchmark.h>

#include <mpi.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "inferkit/attention/attention.hpp"
#include "inferkit/distributed/context_parallel.hpp"
#include "inferkit/distributed/expert_parallel.hpp"
#include "inferkit/moe/router.hpp"

namespace {

using inferkit::Index;
using inferkit::MatrixView;
namespace ib = inferkit::bench;

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// Runs f on every rank between a barrier and an MPI_Allreduce of the elapsed time: the slowest
/// rank's seconds.
template <class F>
double collective_seconds(F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

void finish(benchmark::State& state, double seconds, double bytes_per_iteration) {
  const double it = static_cast<double>(state.iterations());
  state.counters["us"] = seconds * 1e6 / it;
  state.counters["GBps"] = bytes_per_iteration * it / seconds * 1e-9;
}

/// One rank's MoE batch: tokens, routing, plan; the exchange and the counts it implies.
struct EpSetup {
  Index T, D, E, k;
  std::vector<float> x, y;
  inferkit::Routing routing;
  inferkit::DispatchPlan plan;
  inferkit::ExpertParallelExchange ex;
  double bytes_all_ranks = 0;
  // For the baseline: rows to / from every rank, and buffers.
  std::vector<int> scount, sdispl, rcount, rdispl;
  std::vector<float> sbuf, rbuf;

  EpSetup(Index t, Index d, Index e, Index topk)
      : T(t),
        D(d),
        E(e),
        k(topk),
        x(ib::normal_floats(static_cast<std::size_t>(t * d), 1.0f, 3 + rank_of())),
        y(static_cast<std::size_t>(t * d)),
        ex(MPI_COMM_WORLD, inferkit::ExpertPlacement::contiguous(e, size_of())) {
    const auto logits = ib::normal_floats(static_cast<std::size_t>(t * e), 1.0f, 17 + rank_of());
    inferkit::route(MatrixView<const float>(logits.data(), t, e), {.top_k = topk}, routing);
    plan.build(routing);
    run();  // warm the buffers
    const double mine = ex.last_stats().bytes_moved;
    MPI_Allreduce(&mine, &bytes_all_ranks, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const int n = size_of();
    scount.assign(static_cast<std::size_t>(n), 0);
    for (int q = 0; q < n; ++q)
      for (const Index ex_id : ex.placement().local_experts(q))
        scount[static_cast<std::size_t>(q)] += static_cast<int>(plan.expert_rows(ex_id));
    rcount.assign(static_cast<std::size_t>(n), 0);
    MPI_Alltoall(scount.data(), 1, MPI_INT, rcount.data(), 1, MPI_INT, MPI_COMM_WORLD);
    sdispl.assign(static_cast<std::size_t>(n), 0);
    rdispl.assign(static_cast<std::size_t>(n), 0);
    for (int q = 1; q < n; ++q) {
      sdispl[static_cast<std::size_t>(q)] =
          sdispl[static_cast<std::size_t>(q) - 1] + scount[static_cast<std::size_t>(q) - 1];
      rdispl[static_cast<std::size_t>(q)] =
          rdispl[static_cast<std::size_t>(q) - 1] + rcount[static_cast<std::size_t>(q) - 1];
    }
    sbuf = ib::normal_floats(static_cast<std::size_t>((sdispl.back() + scount.back()) * d));
    rbuf.resize(static_cast<std::size_t>((rdispl.back() + rcount.back()) * d));
  }

  void run() {
    ex.run(plan, MatrixView<const float>(x.data(), T, D),
           [](Index, MatrixView<const float> in, MatrixView<float> out) {
             std::memcpy(out.data(), in.data(), static_cast<std::size_t>(in.rows() * in.cols()) * sizeof(float));
           },
           MatrixView<float>(y.data(), T, D), {.num_threads = 1});
  }
  void alltoallv_only(MPI_Datatype row) {
    MPI_Alltoallv(sbuf.data(), scount.data(), sdispl.data(), row, rbuf.data(), rcount.data(), rdispl.data(), row,
                  MPI_COMM_WORLD);
    MPI_Alltoallv(rbuf.data(), rcount.data(), rdispl.data(), row, sbuf.data(), scount.data(), sdispl.data(), row,
                  MPI_COMM_WORLD);
  }
};

void ep_exchange(benchmark::State& state, bool baseline) {
  EpSetup s(state.range(0), state.range(1), state.range(2), state.range(3));
  MPI_Datatype row;
  MPI_Type_contiguous(static_cast<int>(s.D), MPI_FLOAT, &row);
  MPI_Type_commit(&row);
  double total = 0;
  for (auto _ : state) {
    const double t = collective_seconds([&] { baseline ? s.alltoallv_only(row) : s.run(); });
    state.SetIterationTime(t);
    total += t;
  }
  MPI_Type_free(&row);
  finish(state, total, s.bytes_all_ranks);
  ib::label_isa(state);
}

constexpr Index kHq = 32, kHkv = 8, kD = 128;

void cp_decode(benchmark::State& state, bool distributed) {
  const Index tk = state.range(0);
  const int n = size_of(), rank = rank_of();
  const auto shards = inferkit::contiguous_shards(tk, n);
  const auto mine = shards[static_cast<std::size_t>(rank)];
  const Index held = distributed ? mine.tokens : (rank == 0 ? tk : 0);
  const auto k = ib::normal_floats(static_cast<std::size_t>(held * kHkv * kD), 1.0f, 5 + rank);
  const auto v = ib::normal_floats(static_cast<std::size_t>(held * kHkv * kD), 1.0f, 9 + rank);
  const auto q = ib::normal_floats(static_cast<std::size_t>(kHq * kD), 1.0f, 1);
  std::vector<float> out(q.size());
  const inferkit::DenseKv<float> kv({k.data(), held, kHkv, kD}, {v.data(), held, kHkv, kD},
                                    static_cast<std::int32_t>(distributed ? mine.first : 0));
  const inferkit::Tensor3View<const float> qv(q.data(), 1, kHq, kD);
  inferkit::AttentionOptions opt;
  opt.num_threads = 1;
  double total = 0;
  for (auto _ : state) {
    const double t = collective_seconds([&] {
      if (distributed)
        inferkit::context_parallel_attention(MPI_COMM_WORLD, qv, kv, {out.data(), 1, kHq, kD}, {}, opt);
      else if (rank == 0)
        inferkit::attention(qv, kv, {out.data(), 1, kHq, kD}, {}, opt);
    });
    state.SetIterationTime(t);
    total += t;
    benchmark::DoNotOptimize(out.data());
  }
  finish(state, total, static_cast<double>(tk * kHkv * kD) * 2 * sizeof(float));
  ib::label_isa(state);
}

void register_all() {
  const std::vector<std::vector<std::int64_t>> ep_shapes = {{1024, 1024, 8, 2}, {512, 1024, 64, 8}};
  for (const auto& sh : ep_shapes) {
    const std::string shape = "ep_exchange_T" + std::to_string(sh[0]) + "_D" + std::to_string(sh[1]) + "_E" +
                              std::to_string(sh[2]) + "_k" + std::to_string(sh[3]);
    for (bool baseline : {false, true})
      benchmark::RegisterBenchmark(
          ("distributed/" + std::string(baseline ? "mpi_alltoallv/" : "inferkit/") + shape).c_str(),
          [baseline](benchmark::State& st) { ep_exchange(st, baseline); })
          ->Args(sh)
          ->Iterations(40)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
  for (bool cp : {false, true})
    benchmark::RegisterBenchmark(
        ("distributed/" + std::string(cp ? "inferkit/" : "single/") + "cp_decode_Tk16384_Hq32_Hkv8_D128").c_str(),
        [cp](benchmark::State& st) { cp_decode(st, cp); })
        ->Arg(16384)
        ->Iterations(40)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
}

/// Reports nothing: ranks other than 0.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int rank = rank_of();
  // Only rank 0 writes --benchmark_out; the others drop the flag.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i)
    if (rank == 0 || std::strncmp(argv[i], "--benchmark_out", 15) != 0) args.push_back(argv[i]);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  register_all();
  NullReporter null;
  if (rank == 0)
    benchmark::RunSpecifiedBenchmarks();
  else
    benchmark::RunSpecifiedBenchmarks(&null);
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
