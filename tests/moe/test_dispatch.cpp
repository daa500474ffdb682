// Dispatch / combine (moe/dispatch.hpp): layout, round trips against fp64 weighted sums, and
// bitwise independence of threads and of how tokens are split into calls.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "inferkit/moe/dispatch.hpp"
#include "moe_test_util.hpp"

using namespace moe_test;
using inferkit::CombineOptions;
using inferkit::DispatchPlan;
using inferkit::kDroppedExpert;
using inferkit::MatrixView;
using inferkit::Routing;

namespace {

struct Case {
  Routing routing;
  DispatchPlan plan;
};

Case make_case(int T, int E, int k, double cf, unsigned seed) {
  Case c;
  const auto logits = normal(std::size_t(T * E), seed, 1.5f);
  inferkit::route(view(logits, T, E), {.top_k = k, .renormalize = true}, c.routing);
  inferkit::apply_capacity(c.routing, {.capacity_factor = cf});
  c.plan.build(c.routing);
  return c;
}

// A per-expert transform standing in for the expert FFN: row * (e + 1) + e / 8.
void experts(const DispatchPlan& p, const std::vector<float>& in, std::vector<float>& out, Index d) {
  out.assign(in.size(), 0.0f);
  for (Index e = 0; e < p.num_experts(); ++e)
    for (Index r = p.expert_begin(e); r < p.expert_begin(e) + p.expert_rows(e); ++r)
      for (Index i = 0; i < d; ++i) out[r * d + i] = in[r * d + i] * float(e + 1) + float(e) / 8.0f;
}

}  // namespace

TEST_CASE("DispatchPlan: expert-contiguous rows, stable by token, offsets are the kept counts", "[moe][dispatch]") {
  for (double cf : {0.0, 0.8}) {
    Case c = make_case(50, 8, 2, cf, 5);
    const Routing& r = c.routing;
    const DispatchPlan& p = c.plan;
    std::vector<Index> count(8, 0);
    Index kept = 0;
    for (auto e : r.expert_ids)
      if (e != kDroppedExpert) ++count[e], ++kept;
    CHECK(p.num_rows() == kept);
    CHECK(p.num_tokens() == 50);
    CHECK(p.num_slots() == 100);
    REQUIRE(p.expert_offsets().size() == 9);
    CHECK(p.expert_offsets()[0] == 0);
    for (int e = 0; e < 8; ++e) {
      CHECK(p.expert_rows(e) == count[e]);
      for (Index row = p.expert_begin(e); row < p.expert_begin(e) + p.expert_rows(e); ++row) {
        const Index s = p.row_slots()[row];
        CHECK(r.expert_ids[s] == e);
        CHECK(p.slot_rows()[s] == row);
        CHECK(p.row_tokens()[row] == s / 2);
        if (row > p.expert_begin(e)) CHECK(p.row_tokens()[row - 1] < p.row_tokens()[row]);
      }
    }
    for (Index s = 0; s < r.num_slots(); ++s)
      if (r.expert_ids[s] == kDroppedExpert) CHECK(p.slot_rows()[s] == -1);
  }
}

TEST_CASE("dispatch -> experts -> combine equals the fp64 weighted sum per token", "[moe][dispatch]") {
  for (int d : {1, 7, 16, 37, 130}) {
    for (double cf : {0.0, 0.7}) {
      for (bool acc : {false, true}) {
        const int T = 45, E = 6, k = 2;
        Case c = make_case(T, E, k, cf, unsigned(d));
        const auto x = normal(std::size_t(T * d), 100 + unsigned(d));
        std::vector<float> rows(std::size_t(c.plan.num_rows() * d)), y;
        inferkit::dispatch(c.plan, view(x, T, d), MatrixView<float>(rows.data(), c.plan.num_rows(), d));
        for (Index row = 0; row < c.plan.num_rows(); ++row)
          for (int i = 0; i < d; ++i) REQUIRE(rows[row * d + i] == x[c.plan.row_tokens()[row] * d + i]);
        experts(c.plan, rows, y, d);
        std::vector<float> out(std::size_t(T * d), 0.25f);
        inferkit::combine(c.plan, view(y, c.plan.num_rows(), d), MatrixView<float>(out.data(), T, d),
                          {.accumulate = acc});
        // Reference: per slot, the expert transform applied to the token row in double.
        std::vector<std::vector<double>> slot_out(std::size_t(c.routing.num_slots()));
        for (Index s = 0; s < c.routing.num_slots(); ++s) {
          const int e = c.routing.expert_ids[s];
          if (e == kDroppedExpert) continue;
          const Index t = s / k;
          for (int i = 0; i < d; ++i) slot_out[s].push_back(double(x[t * d + i]) * (e + 1) + e / 8.0);
        }
        const auto want = ref_combine(c.routing, slot_out, d);
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < d; ++i) {
            INFO("d " << d << " cf " << cf << " acc " << acc << " token " << t << " i " << i);
            CHECK(out[t * d + i] == Approx(want[t * d + i] + (acc ? 0.25 : 0.0)).epsilon(1e-5).margin(1e-5));
          }
      }
    }
  }
}

TEST_CASE("identity experts: the round trip returns x times the token's kept weight sum", "[moe][dispatch]") {
  const int T = 33, E = 5, d = 19;
  for (double cf : {0.0, 0.5}) {
    Case c = make_case(T, E, 3, cf, 17);
    const auto x = normal(std::size_t(T * d), 18);
    std::vector<float> rows(std::size_t(c.plan.num_rows() * d)), out(std::size_t(T * d));
    inferkit::dispatch(c.plan, view(x, T, d), MatrixView<float>(rows.data(), c.plan.num_rows(), d));
    inferkit::combine(c.plan, view(rows, c.plan.num_rows(), d), MatrixView<float>(out.data(), T, d));
    for (int t = 0; t < T; ++t) {
      double wsum = 0;
      for (int s = 3 * t; s < 3 * t + 3; ++s)
        if (c.routing.expert_ids[s] != kDroppedExpert) wsum += c.routing.weights[s];
      for (int i = 0; i < d; ++i) CHECK(out[t * d + i] == Approx(wsum * x[t * d + i]).epsilon(1e-6).margin(1e-7));
    }
  }
}

TEST_CASE("dispatch / combine: bitwise independent of threads and of splitting the tokens into calls",
          "[moe][dispatch][threads]") {
  const int T = 301, E = 16, k = 4, d = 67;
  const auto logits = normal(std::size_t(T * E), 91);
  const auto x = normal(std::size_t(T * d), 92);
  const auto run = [&](int t0, int t1, int threads) {
    const int n = t1 - t0;
    Routing r;
    inferkit::route(MatrixView<const float>(logits.data() + t0 * E, n, E),
                    {.top_k = k, .renormalize = true, .num_threads = threads}, r);
    DispatchPlan p(r);
    std::vector<float> rows(std::size_t(p.num_rows() * d)), y, out(std::size_t(n * d));
    inferkit::dispatch(p, MatrixView<const float>(x.data() + t0 * d, n, d),
                       MatrixView<float>(rows.data(), p.num_rows(), d), threads);
    experts(p, rows, y, d);
    inferkit::combine(p, view(y, p.num_rows(), d), MatrixView<float>(out.data(), n, d), {.num_threads = threads});
    return out;
  };
  const auto whole1 = run(0, T, 1);
  CHECK(same_bits(whole1, run(0, T, 2)));
  // Two "ranks" of tokens, as the expert-parallel layer splits them.
  auto a = run(0, 120, 2), b = run(120, T, 1);
  a.insert(a.end(), b.begin(), b.end());
  CHECK(same_bits(whole1, a));
}

TEST_CASE("dispatch / combine: empty experts, T = 0, everything dropped, E = 1, other element types",
          "[moe][dispatch]") {
  const int d = 8;
  // T = 0.
  Routing r;
  inferkit::route(MatrixView<const float>(nullptr, 0, 4), {.top_k = 2}, r);
  DispatchPlan p(r);
  CHECK(p.num_rows() == 0);
  inferkit::dispatch(p, MatrixView<const float>(nullptr, 0, d), MatrixView<float>(nullptr, 0, d));
  inferkit::combine(p, MatrixView<const float>(nullptr, 0, d), MatrixView<float>(nullptr, 0, d));
  // Everything dropped: out is zero (or untouched with accumulate).
  const auto logits = normal(5 * 4, 3);
  const auto x = normal(5 * d, 4);
  inferkit::route(view(logits, 5, 4), {.top_k = 2}, r);
  inferkit::apply_capacity(r, {.capacity = 0});
  p.build(r);
  CHECK(p.num_rows() == 0);
  for (int e = 0; e < 4; ++e) CHECK(p.expert_rows(e) == 0);
  std::vector<float> out(5 * d, 3.0f);
  inferkit::combine(p, MatrixView<const float>(nullptr, 0, d), MatrixView<float>(out.data(), 5, d),
                    {.accumulate = true});
  CHECK(out == std::vector<float>(5 * d, 3.0f));
  inferkit::combine(p, MatrixView<const float>(nullptr, 0, d), MatrixView<float>(out.data(), 5, d));
  CHECK(out == std::vector<float>(5 * d, 0.0f));
  // Skewed routing: experts 1..3 empty.
  std::vector<float> skew(5 * 4, 0.0f);
  for (int t = 0; t < 5; ++t) skew[t * 4] = 5.0f;
  inferkit::route(view(skew, 5, 4), {.top_k = 1}, r);
  p.build(r);
  CHECK(p.expert_rows(0) == 5);
  CHECK(p.expert_rows(3) == 0);
  // bf16-like 16-bit rows and 8-byte rows move as bytes.
  std::vector<std::uint16_t> h(5 * 3), hrows(5 * 3);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = std::uint16_t(i * 7 + 1);
  inferkit::dispatch(p, MatrixView<const std::uint16_t>(h.data(), 5, 3), MatrixView<std::uint16_t>(hrows.data(), 5, 3));
  CHECK(hrows == h);
  std::vector<double> g(5 * 3), grows(5 * 3);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = double(i) + 0.5;
  inferkit::dispatch(p, MatrixView<double>(g.data(), 5, 3), MatrixView<double>(grows.data(), 5, 3));
  CHECK(grows == g);
}

TEST_CASE("dispatch / combine: shape errors name the parameter", "[moe][dispatch][errors]") {
  Case c = make_case(10, 4, 2, 0.0, 7);
  const int d = 4;
  std::vector<float> x(10 * d), rows(std::size_t(c.plan.num_rows() * d)), out(10 * d);
  CHECK_THROWS_WITH(inferkit::dispatch(c.plan, MatrixView<const float>(x.data(), 9, d),
                                       MatrixView<float>(rows.data(), c.plan.num_rows(), d)),
                    Catch::Contains("tokens.rows() = 9"));
  CHECK_THROWS_WITH(
      inferkit::dispatch(c.plan, MatrixView<const float>(x.data(), 10, d), MatrixView<float>(rows.data(), 3, d)),
      Catch::Contains("rows.rows() = 3"));
  CHECK_THROWS_WITH(inferkit::dispatch(c.plan, MatrixView<const float>(x.data(), 10, d),
                                       MatrixView<float>(rows.data(), c.plan.num_rows(), 2)),
                    Catch::Contains("rows.cols() = 2"));
  CHECK_THROWS_WITH(
      inferkit::combine(c.plan, MatrixView<const float>(rows.data(), 3, d), MatrixView<float>(out.data(), 10, d)),
      Catch::Contains("expert_out.rows() = 3"));
  CHECK_THROWS_WITH(inferkit::combine(c.plan, MatrixView<const float>(rows.data(), c.plan.num_rows(), d),
                                      MatrixView<float>(out.data(), 8, d)),
                    Catch::Contains("out.rows() = 8"));
  Routing bad = c.routing;
  bad.expert_ids[0] = 9;
  CHECK_THROWS_AS(c.plan.build(bad), std::out_of_range);
}

TEST_CASE("dispatch into a buffer past kStreamMinBytes (non-temporal stores on AVX2) copies every row exactly",
          "[moe][dispatch]") {
  // 4096 rows of 4100 floats: 67.2 MB, past the 64 MiB threshold; the row stride (16,400 bytes)
  // alternates 32-byte-aligned and unaligned rows, and 4100 is no multiple of the 32-float step.
  const int T = 1024, E = 8, k = 4, d = 4100;
  Case c = make_case(T, E, k, 0.0, 23);
  REQUIRE(std::size_t(c.plan.num_rows()) * d * sizeof(float) >= inferkit::detail::kStreamMinBytes);
  const auto x = normal(std::size_t(T) * d, 24);
  for (int threads : {1, 2}) {
    std::vector<float> rows(std::size_t(c.plan.num_rows()) * d, -1.0f);
    inferkit::dispatch(c.plan, view(x, T, d), MatrixView<float>(rows.data(), c.plan.num_rows(), d), threads);
    bool same = true;
    for (Index r = 0; r < c.plan.num_rows(); ++r)
      same = same && std::memcmp(rows.data() + std::size_t(r) * d,
                                 x.data() + std::size_t(c.plan.row_tokens()[std::size_t(r)]) * d,
                                 std::size_t(d) * sizeof(float)) == 0;
    CHECK(same);
  }
}
