// Expert parallelism (distributed/expert_parallel.hpp) under mpirun -np 2 and -np 3: every rank
// builds the same global batch, routes its own token range and runs the exchange; its outputs
// must equal, bit for bit, the single-process MoE layer computed on every rank over all tokens
// (route, dispatch, one product per expert, combine), and the fp64 per-token MoE within rounding.

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/mpi_test_util.hpp"
#include "inferkit/distributed/expert_parallel.hpp"
#include "inferkit/moe/capacity.hpp"
#include "inferkit/moe/dispatch.hpp"
#include "inferkit/moe/router.hpp"
#include "moe/moe_test_util.hpp"

using inferkit::Index;
using inferkit::MatrixView;

namespace {

/// A batch and its experts: x [T, D], router logits [T, E], expert e = W_e [Dout, D] then SiLU.
struct Layer {
  Index T, D, Dout, E;
  std::vector<float> x, logits, w;
  Layer(Index t, Index d, Index dout, Index e, unsigned seed)
      : T(t),
        D(d),
        Dout(dout),
        E(e),
        x(moe_test::normal(static_cast<std::size_t>(t * d), seed)),
        logits(moe_test::normal(static_cast<std::size_t>(t * e), seed + 1, 2.0f)),
        w(moe_test::normal(static_cast<std::size_t>(e * dout * d), seed + 2, 0.3f)) {}

  /// The expert as a caller would write it, row by row in a fixed order (so a row's bits do not
  /// depend on how many rows share the call).
  void expert(Index e, MatrixView<const float> in, MatrixView<float> out) const {
    for (Index r = 0; r < in.rows(); ++r)
      for (Index o = 0; o < Dout; ++o) {
        const float* wr = w.data() + (e * Dout + o) * D;
        float acc = 0.0f;
        for (Index k = 0; k < D; ++k) acc = std::fma(wr[k], in(r, k), acc);
        out(r, o) = acc / (1.0f + std::exp(-acc));
      }
  }
  /// fp64 expert output of one row.
  double expert64(Index e, const float* row, Index o) const {
    double acc = 0;
    for (Index k = 0; k < D; ++k) acc += double(w[static_cast<std::size_t>((e * Dout + o) * D + k)]) * row[k];
    return acc / (1.0 + std::exp(-acc));
  }
};

/// Single-process MoE layer over tokens [t0, t0 + n): route, dispatch, one call per expert, combine.
std::vector<float> single_process(const Layer& L, const inferkit::RouterOptions& ro, Index t0, Index n,
                                  std::vector<float> init = {}) {
  inferkit::Routing routing;
  inferkit::route(MatrixView<const float>(L.logits.data() + t0 * L.E, n, L.E), ro, routing);
  const inferkit::DispatchPlan plan(routing);
  std::vector<float> rows(static_cast<std::size_t>(plan.num_rows() * L.D)),
      eo(static_cast<std::size_t>(plan.num_rows() * L.Dout));
  inferkit::dispatch(plan, MatrixView<const float>(L.x.data() + t0 * L.D, n, L.D),
                     MatrixView<float>(rows.data(), plan.num_rows(), L.D));
  for (Index e = 0; e < L.E; ++e)
    L.expert(e, MatrixView<const float>(rows.data() + plan.expert_begin(e) * L.D, plan.expert_rows(e), L.D),
             MatrixView<float>(eo.data() + plan.expert_begin(e) * L.Dout, plan.expert_rows(e), L.Dout));
  std::vector<float> y = init.empty() ? std::vector<float>(static_cast<std::size_t>(n * L.Dout), -7.0f) : init;
  inferkit::combine(plan, MatrixView<const float>(eo.data(), plan.num_rows(), L.Dout),
                    MatrixView<float>(y.data(), n, L.Dout), {.accumulate = !init.empty()});
  return y;
}

struct Run {
  std::vector<float> y;          // this rank's token outputs
  std::vector<Index> rows_seen;  // rows each expert's callback got on this rank (-1: not called)
  inferkit::ExpertExchangeStats stats;
};

/// The distributed layer: this rank's tokens are [first[rank], first[rank + 1]).
Run distributed(const Layer& L, const inferkit::RouterOptions& ro, const std::vector<Index>& first,
                const inferkit::ExpertPlacement& placement, bool accumulate = false) {
  const int rank = test::world_rank();
  const Index t0 = first[static_cast<std::size_t>(rank)], n = first[static_cast<std::size_t>(rank) + 1] - t0;
  inferkit::Routing routing;
  inferkit::route(MatrixView<const float>(L.logits.data() + t0 * L.E, n, L.E), ro, routing);
  const inferkit::DispatchPlan plan(routing);
  Run r;
  r.y.assign(static_cast<std::size_t>(n * L.Dout), -7.0f);
  if (accumulate)
    for (Index i = 0; i < n * L.Dout; ++i)
      r.y[static_cast<std::size_t>(i)] = 0.01f * static_cast<float>((t0 * L.Dout + i) % 17);
  r.rows_seen.assign(static_cast<std::size_t>(L.E), -1);
  inferkit::ExpertParallelExchange ex(MPI_COMM_WORLD, placement);
  ex.run(plan, MatrixView<const float>(L.x.data() + t0 * L.D, n, L.D),
         [&](Index e, MatrixView<const float> in, MatrixView<float> out) {
           CHECK(r.rows_seen[static_cast<std::size_t>(e)] == -1);  // one call per expert
           r.rows_seen[static_cast<std::size_t>(e)] = in.rows();
           L.expert(e, in, out);
         },
         MatrixView<float>(r.y.data(), n, L.Dout), {.accumulate = accumulate});
  r.stats = ex.last_stats();
  return r;
}

std::vector<Index> token_ranges(Index T, int n, const std::vector<double>& cuts) {
  std::vector<Index> f{0};
  for (int r = 1; r < n; ++r)
    f.push_back(static_cast<Index>(cuts[static_cast<std::size_t>(r - 1)] * static_cast<double>(T)));
  f.push_back(T);
  return f;
}

/// Checks this rank's outputs against the single-process layer (bits) and the fp64 layer.
void check(const Layer& L, const inferkit::RouterOptions& ro, const std::vector<Index>& first,
           const inferkit::ExpertPlacement& placement, bool accumulate = false) {
  const int rank = test::world_rank();
  const Index t0 = first[static_cast<std::size_t>(rank)], n = first[static_cast<std::size_t>(rank) + 1] - t0;
  const Run got = distributed(L, ro, first, placement, accumulate);
  std::vector<float> init;
  if (accumulate)
    for (Index i = 0; i < L.T * L.Dout; ++i) init.push_back(0.01f * static_cast<float>(i % 17));
  const std::vector<float> all = single_process(L, ro, 0, L.T, init);
  const std::vector<float> want(all.begin() + t0 * L.Dout, all.begin() + (t0 + n) * L.Dout);
  INFO("rank " << rank << " tokens [" << t0 << ", " << t0 + n << ") of " << L.T << ", E = " << L.E);
  CHECK(moe_test::same_bits(got.y, want));
  // The fp64 MoE: y_t = init_t + sum over t's slots of w_s * expert_e(x_t).
  inferkit::Routing routing;
  inferkit::route(MatrixView<const float>(L.logits.data(), L.T, L.E), ro, routing);
  double worst = 0;
  for (Index t = t0; t < t0 + n; ++t)
    for (Index o = 0; o < L.Dout; ++o) {
      double y = accumulate ? init[static_cast<std::size_t>(t * L.Dout + o)] : 0.0;
      for (Index s = routing.token_offsets[static_cast<std::size_t>(t)];
           s < routing.token_offsets[static_cast<std::size_t>(t) + 1]; ++s)
        y += routing.weights[static_cast<std::size_t>(s)] *
             L.expert64(routing.expert_ids[static_cast<std::size_t>(s)], L.x.data() + t * L.D, o);
      worst = std::max(worst, std::abs(y - got.y[static_cast<std::size_t>((t - t0) * L.Dout + o)]));
    }
  CHECK(worst < 5e-5);
  // Each local expert ran once over every row routed to it, from all ranks.
  const inferkit::DispatchPlan global(routing);
  for (const Index e : placement.local_experts(rank)) {
    INFO("expert " << e);
    CHECK(got.rows_seen[static_cast<std::size_t>(e)] == (global.expert_rows(e) > 0 ? global.expert_rows(e) : -1));
  }
  for (Index e = 0; e < L.E; ++e)
    if (placement.owner(e) != rank) CHECK(got.rows_seen[static_cast<std::size_t>(e)] == -1);
}

}  // namespace

TEST_CASE("expert-parallel MoE equals the single-process layer bitwise (contiguous experts)", "[distributed][expert]") {
  const int n = test::world_size();
  const inferkit::RouterOptions ro{.top_k = 2, .renormalize = true};
  for (Index E : {8, 5, 7}) {  // uneven ranges over 3 ranks for 5 and 7
    const Layer L(96, 48, 40, E, static_cast<unsigned>(E));
    check(L, ro, token_ranges(L.T, n, {0.3, 0.55}), inferkit::ExpertPlacement::contiguous(E, n));
  }
  // Top-1 (Switch) and top-3 with a routed scaling factor, accumulating into a residual.
  const Layer L(70, 32, 32, 6, 3);
  check(L, {.top_k = 1}, token_ranges(L.T, n, {0.5, 0.9}), inferkit::ExpertPlacement::contiguous(6, n));
  check(L, {.top_k = 3, .routed_scaling_factor = 2.5f}, token_ranges(L.T, n, {0.2, 0.4}),
        inferkit::ExpertPlacement::contiguous(6, n), true);
}

TEST_CASE("expert-parallel MoE with an explicit, scattered placement", "[distributed][expert]") {
  const int n = test::world_size();
  const Layer L(80, 24, 16, 9, 21);
  std::vector<int> owner;
  for (Index e = 0; e < 9; ++e) owner.push_back(static_cast<int>((e * 5 + 1) % n));
  check(L, {.top_k = 2}, token_ranges(L.T, n, {0.45, 0.7}), inferkit::ExpertPlacement(owner, n));
  // Every expert on the last rank: the other ranks only send and receive.
  check(L, {.top_k = 2}, token_ranges(L.T, n, {0.45, 0.7}), inferkit::ExpertPlacement(std::vector<int>(9, n - 1), n));
}

TEST_CASE("expert-parallel MoE with empty ranks and empty experts", "[distributed][expert]") {
  const int n = test::world_size();
  Layer L(64, 16, 16, 6, 33);
  // No token is routed to rank 0's experts (their logits far below the rest): rank 0 receives
  // nothing; expert 5 is empty too.
  const auto placement = inferkit::ExpertPlacement::contiguous(6, n);
  for (Index t = 0; t < L.T; ++t) {
    for (const Index e : placement.local_experts(0)) L.logits[static_cast<std::size_t>(t * 6 + e)] = -50.0f;
    L.logits[static_cast<std::size_t>(t * 6 + 5)] = -60.0f;
  }
  check(L, {.top_k = 2}, token_ranges(L.T, n, {0.3, 0.6}), placement);
  // A rank with no tokens of its own (rank 0), and a rank holding no expert (E = 2 < 3 ranks).
  const Layer M(40, 16, 8, 2, 44);
  check(M, {.top_k = 1}, token_ranges(M.T, n, {0.0, 0.5}), inferkit::ExpertPlacement::contiguous(2, n));
  // No tokens anywhere.
  const Layer Z(0, 8, 8, 4, 55);
  check(Z, {.top_k = 2}, token_ranges(0, n, {0.0, 0.0}), inferkit::ExpertPlacement::contiguous(4, n));
}

TEST_CASE("expert-parallel statistics count the rows that moved", "[distributed][expert]") {
  const int n = test::world_size(), rank = test::world_rank();
  const Layer L(60, 16, 8, 4, 66);
  const auto first = token_ranges(L.T, n, {0.5, 0.75});
  const auto placement = inferkit::ExpertPlacement::contiguous(4, n);
  const Run got = distributed(L, {.top_k = 2}, first, placement);
  const Index mine = first[static_cast<std::size_t>(rank) + 1] - first[static_cast<std::size_t>(rank)];
  CHECK(got.stats.rows_sent == 2 * mine);  // top-2, dropless
  Index local_rows = 0;
  inferkit::Routing routing;
  inferkit::route(MatrixView<const float>(L.logits.data() + first[static_cast<std::size_t>(rank)] * 4, mine, 4),
                  {.top_k = 2}, routing);
  for (std::int32_t e : routing.expert_ids) local_rows += placement.owner(e) == rank ? 1 : 0;
  CHECK(got.stats.rows_to_others == 2 * mine - local_rows);
  CHECK(got.stats.bytes_moved == double(2 * mine - local_rows) * (16 + 8) * 4);
  long total_sent = got.stats.rows_sent, total_received = got.stats.rows_received, s = 0, r = 0;
  MPI_Allreduce(&total_sent, &s, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&total_received, &r, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK(s == r);
  CHECK(s == 2 * L.T);
}

TEST_CASE("expert-parallel errors throw on every rank", "[distributed][expert][errors]") {
  const int n = test::world_size(), rank = test::world_rank();
  const Layer L(20, 8, 8, 4, 77);
  inferkit::Routing routing;
  inferkit::route(MatrixView<const float>(L.logits.data(), L.T, 4), {.top_k = 2}, routing);
  const inferkit::DispatchPlan plan(routing);
  std::vector<float> y(static_cast<std::size_t>(L.T * 8));
  inferkit::ExpertParallelExchange ex(MPI_COMM_WORLD, inferkit::ExpertPlacement::contiguous(4, n));
  const auto expert = [&](Index e, MatrixView<const float> in, MatrixView<float> out) { L.expert(e, in, out); };
  // One rank's output has the wrong row count.
  const Index rows = rank == n - 1 ? L.T - 1 : L.T;
  const auto bad = [&] {
    ex.run(plan, MatrixView<const float>(L.x.data(), L.T, 8), expert, MatrixView<float>(y.data(), rows, 8));
  };
  if (rank == n - 1)
    CHECK_THROWS_WITH(bad(), Catch::Contains("out.rows() = 19 is invalid"));
  else
    CHECK_THROWS_WITH(bad(), Catch::Contains("rank = " + std::to_string(n - 1) + " is invalid"));
  // Ranks disagreeing on the output width.
  const Index cols = rank == 0 ? 4 : 8;
  CHECK_THROWS_WITH(
      ex.run(plan, MatrixView<const float>(L.x.data(), L.T, 8), expert, MatrixView<float>(y.data(), L.T, cols)),
      Catch::Contains("out.cols() = 8 is invalid: differs across ranks"));
  // The expert callback throws on rank 1 only: every rank throws, nobody hangs.
  const auto throwing = [&](Index e, MatrixView<const float> in, MatrixView<float> out) {
    if (rank == 1) throw std::runtime_error("expert failed here");
    L.expert(e, in, out);
  };
  const auto call = [&] {
    ex.run(plan, MatrixView<const float>(L.x.data(), L.T, 8), throwing, MatrixView<float>(y.data(), L.T, 8));
  };
  if (rank == 1)
    CHECK_THROWS_WITH(call(), "expert failed here");
  else
    CHECK_THROWS_WITH(call(), Catch::Contains("the expert callback threw on rank 1"));
  // Still usable afterwards.
  CHECK_NOTHROW(ex.run(plan, MatrixView<const float>(L.x.data(), L.T, 8), expert, MatrixView<float>(y.data(), L.T, 8)));
  // Placements.
  CHECK_THROWS_WITH(inferkit::ExpertParallelExchange(MPI_COMM_WORLD, inferkit::ExpertPlacement::contiguous(4, n + 1)),
                    Catch::Contains("placement.num_ranks() = " + std::to_string(n + 1)));
  CHECK_THROWS_WITH(inferkit::ExpertPlacement({0, 3}, 2), Catch::Contains("owner[1] = 3 is invalid"));
  CHECK_THROWS_WITH(inferkit::ExpertPlacement::contiguous(0, 2), Catch::Contains("num_experts = 0 is invalid"));
  const auto p = inferkit::ExpertPlacement::contiguous(7, 3);
  CHECK(p.local_experts(0).size() == 3);
  CHECK(p.local_experts(1).size() == 2);
  CHECK(p.local_experts(2).size() == 2);
  CHECK(p.owner(3) == 1);
  CHECK(p.ordered());
  CHECK_FALSE(inferkit::ExpertPlacement({1, 0}, 2).ordered());
}

TEST_CASE("routing decided globally and sliced per rank gives the single-process result with capacity drops",
          "[distributed][expert]") {
  const int n = test::world_size(), rank = test::world_rank();
  const Layer L(90, 16, 16, 6, 88);
  const inferkit::RouterOptions ro{.top_k = 2};
  const auto placement = inferkit::ExpertPlacement::contiguous(6, n);
  // One process: route all tokens, capacity factor 0.8 (drops), dispatch, experts, combine.
  inferkit::Routing global;
  inferkit::route(MatrixView<const float>(L.logits.data(), L.T, L.E), ro, global);
  inferkit::MoeStats stats;
  inferkit::apply_capacity(global, {.capacity_factor = 0.8}, &stats);
  REQUIRE(stats.dropped_assignments > 0);
  const inferkit::DispatchPlan gplan(global);
  std::vector<float> rows(static_cast<std::size_t>(gplan.num_rows() * L.D)),
      eo(static_cast<std::size_t>(gplan.num_rows() * L.Dout));
  inferkit::dispatch(gplan, MatrixView<const float>(L.x.data(), L.T, L.D),
                     MatrixView<float>(rows.data(), gplan.num_rows(), L.D));
  for (Index e = 0; e < L.E; ++e)
    L.expert(e, MatrixView<const float>(rows.data() + gplan.expert_begin(e) * L.D, gplan.expert_rows(e), L.D),
             MatrixView<float>(eo.data() + gplan.expert_begin(e) * L.Dout, gplan.expert_rows(e), L.Dout));
  std::vector<float> want(static_cast<std::size_t>(L.T * L.Dout));
  inferkit::combine(gplan, MatrixView<const float>(eo.data(), gplan.num_rows(), L.Dout),
                    MatrixView<float>(want.data(), L.T, L.Dout));
  // Each rank: its slice of the global routing through the exchange.
  const auto first = token_ranges(L.T, n, {0.4, 0.7});
  const Index t0 = first[static_cast<std::size_t>(rank)], cnt = first[static_cast<std::size_t>(rank) + 1] - t0;
  inferkit::Routing mine;
  inferkit::routing_slice(global, t0, cnt, mine);
  CHECK(mine.num_tokens == cnt);
  CHECK(mine.token_offsets.front() == 0);
  const inferkit::DispatchPlan plan(mine);
  std::vector<float> got(static_cast<std::size_t>(cnt * L.Dout), -7.0f);
  inferkit::ExpertParallelExchange ex(MPI_COMM_WORLD, placement);
  ex.run(
      plan, MatrixView<const float>(L.x.data() + t0 * L.D, cnt, L.D),
      [&](Index e, MatrixView<const float> in, MatrixView<float> out) { L.expert(e, in, out); },
      MatrixView<float>(got.data(), cnt, L.Dout));
  CHECK(moe_test::same_bits(got, std::vector<float>(want.begin() + t0 * L.Dout, want.begin() + (t0 + cnt) * L.Dout)));
  inferkit::Routing bad;
  CHECK_THROWS_WITH(inferkit::routing_slice(global, 80, 11, bad), Catch::Contains("first + count = 91 is invalid"));
}
