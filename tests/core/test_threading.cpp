// core/threading.hpp: every entry point that takes a thread count accepts 0 (OpenMP's default)
// and 1..kMaxThreads, and rejects anything else by name before doing any work.
#include <catch2/catch.hpp>

#include <vector>

#include "inferkit/inferkit.hpp"

using Catch::Matchers::Contains;
using inferkit::Index;
using inferkit::MatrixView;

TEST_CASE("require_thread_count accepts 0..kMaxThreads and names the parameter otherwise", "[core][threads]") {
  CHECK_NOTHROW(inferkit::require_thread_count("n", 0));
  CHECK_NOTHROW(inferkit::require_thread_count("n", 1));
  CHECK_NOTHROW(inferkit::require_thread_count("n", 1024));
  CHECK_THROWS_WITH(inferkit::require_thread_count("n", 1025), Contains("n = 1025 is invalid") && Contains("1..1024"));
  CHECK_THROWS_WITH(inferkit::require_thread_count("n", -1), Contains("n = -1 is invalid"));
}

TEST_CASE("every kernel with a thread count rejects -1 and kMaxThreads + 1 by name", "[core][threads][errors]") {
  for (const int bad : {-1, inferkit::kMaxThreads + 1}) {
    const std::string named = "num_threads = " + std::to_string(bad) + " is invalid";
    // attention
    std::vector<float> q(1 * 2 * 4, 0.5f), k(3 * 1 * 4, 0.25f), v(3 * 1 * 4, 1.0f), out(1 * 2 * 4);
    const inferkit::Tensor3View<const float> qv(q.data(), 1, 2, 4), kv(k.data(), 3, 1, 4), vv(v.data(), 3, 1, 4);
    CHECK_THROWS_WITH(
        inferkit::attention(qv, inferkit::DenseKv<float>(kv, vv), {out.data(), 1, 2, 4}, {.num_threads = bad}),
        Contains(named));
    // quantized products
    std::vector<float> w(8 * 32, 0.125f), x(32, 1.0f), y(8);
    const inferkit::Int8Weights q8(MatrixView<const float>(w.data(), 8, 32));
    CHECK_THROWS_WITH(inferkit::matvec(q8, x, y, {.num_threads = bad}), Contains(named));
    std::vector<float> ym(8);
    CHECK_THROWS_WITH(inferkit::matmul(MatrixView<const float>(x.data(), 1, 32), q8, MatrixView<float>(ym.data(), 1, 8),
                                       {.num_threads = bad}),
                      Contains(named));
    // mixture of experts
    std::vector<float> logits(3 * 4, 0.0f);
    inferkit::Routing r;
    CHECK_THROWS_WITH(
        inferkit::route(MatrixView<const float>(logits.data(), 3, 4), {.top_k = 2, .num_threads = bad}, r),
        Contains(named));
    CHECK_THROWS_WITH(inferkit::route_expert_choice(MatrixView<const float>(logits.data(), 3, 4),
                                                    {.capacity_factor = 1.0, .num_threads = bad}, r),
                      Contains(named));
    inferkit::route(MatrixView<const float>(logits.data(), 3, 4), {.top_k = 2}, r);
    const inferkit::DispatchPlan plan(r);
    std::vector<float> tokens(3 * 5, 1.0f), rows(static_cast<std::size_t>(plan.num_rows() * 5)), combined(3 * 5);
    CHECK_THROWS_WITH(inferkit::dispatch(plan, MatrixView<const float>(tokens.data(), 3, 5),
                                         MatrixView<float>(rows.data(), plan.num_rows(), 5), bad),
                      Contains(named));
    CHECK_THROWS_WITH(inferkit::combine(plan, MatrixView<const float>(rows.data(), plan.num_rows(), 5),
                                        MatrixView<float>(combined.data(), 3, 5), {.num_threads = bad}),
                      Contains(named));
  }
}
