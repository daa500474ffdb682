// Routing (moe/router.hpp) against naive fp64 per-token references, closed forms, ties and
// logit errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "inferkit/moe/router.hpp"
#include "moe_test_util.hpp"

using namespace moe_test;
using inferkit::ExpertChoiceOptions;
using inferkit::RouterOptions;
using inferkit::RouterScoring;
using inferkit::Routing;

namespace {

void check_against_reference(const std::vector<float>& logits, int T, int E, const RouterOptions& o) {
  Routing r;
  inferkit::route(view(logits, T, E), o, r);
  REQUIRE(r.num_tokens == T);
  REQUIRE(r.num_experts == E);
  REQUIRE(r.top_k == o.top_k);
  REQUIRE(r.num_slots() == T * o.top_k);
  std::vector<double> mean_p(E, 0.0);
  double z = 0;
  for (int t = 0; t < T; ++t) {
    const RefToken ref = ref_route_token(logits.data() + t * E, E, o);
    REQUIRE(r.token_offsets[t] == t * o.top_k);
    for (int j = 0; j < o.top_k; ++j) {
      INFO("token " << t << " slot " << j);
      REQUIRE(r.expert_ids[t * o.top_k + j] == ref.ids[j]);
      CHECK(double(r.weights[t * o.top_k + j]) == Approx(ref.weights[j]).epsilon(1e-6).margin(1e-30));
    }
    for (int e = 0; e < E; ++e) mean_p[e] += ref.prob[e] / T;
    z += ref.lse * ref.lse / T;
  }
  for (int e = 0; e < E; ++e) CHECK(r.mean_probability[e] == Approx(mean_p[e]).epsilon(1e-12));
  CHECK(r.z_loss == Approx(z).epsilon(1e-12));
}

}  // namespace

TEST_CASE("route: every scoring mode, renormalization, scaling, bias and group limit match the fp64 reference",
          "[moe][router]") {
  const int T = 37, E = 16;
  const auto logits = normal(T * E, 3, 2.0f);
  const auto bias = normal(E, 4, 0.3f);
  for (auto scoring : {RouterScoring::softmax_topk, RouterScoring::topk_softmax, RouterScoring::sigmoid}) {
    for (bool renorm : {false, true}) {
      for (bool biased : {false, true}) {
        for (int groups : {1, 4}) {
          for (int k : {1, 3, 16}) {
            if (groups == 4 && k > 8) continue;  // two kept groups of 4 hold 8 experts
            RouterOptions o{.top_k = k, .scoring = scoring, .renormalize = renorm, .routed_scaling_factor = 2.5f};
            if (biased) o.selection_bias = bias;
            if (groups > 1) {
              o.num_groups = groups;
              o.topk_groups = 2;
              o.group_score_experts = biased ? 2 : 1;
            }
            INFO("scoring " << int(scoring) << " renorm " << renorm << " bias " << biased << " groups " << groups
                            << " k " << k);
            check_against_reference(logits, T, E, o);
          }
        }
      }
    }
  }
}

TEST_CASE("route: Mixtral's top-k-then-softmax equals softmax-then-top-k renormalized", "[moe][router]") {
  const int T = 20, E = 8;
  const auto logits = normal(T * E, 5);
  Routing a, b;
  inferkit::route(view(logits, T, E), {.top_k = 2, .scoring = RouterScoring::topk_softmax}, a);
  inferkit::route(view(logits, T, E), {.top_k = 2, .scoring = RouterScoring::softmax_topk, .renormalize = true}, b);
  CHECK(a.expert_ids == b.expert_ids);
  for (int s = 0; s < a.num_slots(); ++s) CHECK(a.weights[s] == Approx(b.weights[s]).epsilon(1e-6));
  for (int t = 0; t < T; ++t) CHECK(double(a.weights[2 * t]) + a.weights[2 * t + 1] == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("route: ties go to the lowest expert id, group ties to the lowest group", "[moe][router]") {
  const int E = 8;
  std::vector<float> logits(E, 0.5f);
  Routing r;
  inferkit::route(view(logits, 1, E), {.top_k = 3}, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 1, 2});
  for (float w : r.weights) CHECK(w == Approx(1.0 / E));
  // Equal top logits at 2 and 6, then 4: order 2, 6, 4.
  logits = {0, 0, 3, 0, 1, 0, 3, 0};
  inferkit::route(view(logits, 1, E), {.top_k = 3}, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{2, 6, 4});
  // Four equal groups: the first two groups are kept.
  std::fill(logits.begin(), logits.end(), 1.0f);
  inferkit::route(view(logits, 1, E), {.top_k = 4, .num_groups = 4, .topk_groups = 2}, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 1, 2, 3});
}

TEST_CASE("route: the sigmoid selection bias picks experts but does not change weights", "[moe][router]") {
  const int E = 4;
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 5.0f};
  Routing r;
  inferkit::route(view(logits, 1, E), {.top_k = 2, .scoring = RouterScoring::sigmoid, .selection_bias = bias}, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{3, 0});
  CHECK(r.weights[0] == Approx(1.0 / (1.0 + std::exp(1.0))));
  CHECK(r.weights[1] == Approx(1.0 / (1.0 + std::exp(-2.0))));
  inferkit::route(view(logits, 1, E),
                  {.top_k = 2,
                   .scoring = RouterScoring::sigmoid,
                   .renormalize = true,
                   .routed_scaling_factor = 2.5f,
                   .selection_bias = bias},
                  r);
  const double s3 = 1.0 / (1.0 + std::exp(1.0)), s0 = 1.0 / (1.0 + std::exp(-2.0));
  CHECK(r.weights[0] == Approx(2.5 * s3 / (s3 + s0)));
  CHECK(r.weights[1] == Approx(2.5 * s0 / (s3 + s0)));
}

TEST_CASE("route: DeepSeek-V3 groups score the sum of their top-2, not their max", "[moe][router]") {
  // Group 0 = experts 0..2 with one strong expert, group 1 = experts 3..5 with two good ones.
  const std::vector<float> logits = {3.0f, -4.0f, -4.0f, 2.0f, 2.0f, -4.0f};
  const std::vector<float> zero(6, 0.0f);
  Routing r;
  RouterOptions o{.top_k = 2,
                  .scoring = RouterScoring::sigmoid,
                  .selection_bias = zero,
                  .num_groups = 2,
                  .topk_groups = 1,
                  .group_score_experts = 2};
  inferkit::route(view(logits, 1, 6), o, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{3, 4});  // 0.881 + 0.881 > 0.953 + 0.018
  o.group_score_experts = 1;                               // the max (DeepSeek-V2, no bias)
  inferkit::route(view(logits, 1, 6), o, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 1});
}

TEST_CASE("route: statistics closed forms (uniform logits: P = 1/E, z = log(E)^2)", "[moe][router]") {
  for (int E : {1, 4, 64}) {
    std::vector<float> logits(std::size_t(10 * E), 0.0f);
    Routing r;
    inferkit::route(view(logits, 10, E), {.top_k = 1}, r);
    for (double p : r.mean_probability) CHECK(p == Approx(1.0 / E));
    CHECK(r.z_loss == Approx(std::log(double(E)) * std::log(double(E))).margin(1e-12));
  }
  // E = 1: every token goes to expert 0 with weight 1 (softmax) and sigmoid(l) (sigmoid).
  const std::vector<float> one = {-3.0f, 0.0f, 7.0f};
  Routing r;
  inferkit::route(view(one, 3, 1), {.top_k = 1}, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 0, 0});
  CHECK(r.weights == std::vector<float>{1.0f, 1.0f, 1.0f});
  inferkit::route(view(one, 3, 1), {.top_k = 1, .scoring = RouterScoring::sigmoid}, r);
  CHECK(r.weights[0] == Approx(1.0 / (1.0 + std::exp(3.0))));
}

TEST_CASE("route: T = 0 gives an empty routing; -inf logits are allowed", "[moe][router]") {
  std::vector<float> none;
  Routing r;
  inferkit::route(inferkit::MatrixView<const float>(nullptr, 0, 8), {.top_k = 2}, r);
  CHECK(r.num_tokens == 0);
  CHECK(r.num_slots() == 0);
  CHECK(r.token_offsets == std::vector<Index>{0});
  CHECK(r.z_loss == 0.0);
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> l = {ninf, 1.0f, ninf, 0.0f};
  inferkit::route(view(l, 1, 4), {.top_k = 3}, r);
  CHECK(r.expert_ids == std::vector<std::int32_t>{1, 3, 0});
  CHECK(r.weights[2] == 0.0f);
}

TEST_CASE("route: NaN and +inf logits and all -inf rows are errors naming the token and expert",
          "[moe][router][errors]") {
  const int T = 300, E = 8;  // several chunks, so the parallel path reports the first bad entry
  for (int threads : {1, 2}) {
    auto logits = normal(T * E, 9);
    logits[200 * E + 5] = std::numeric_limits<float>::quiet_NaN();
    logits[250 * E + 1] = std::numeric_limits<float>::quiet_NaN();
    Routing r;
    CHECK_THROWS_WITH(inferkit::route(view(logits, T, E), {.top_k = 2, .num_threads = threads}, r),
                      Catch::Contains("logits[200][5]") && Catch::Contains("NaN"));
    logits = normal(T * E, 9);
    logits[7 * E + 2] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(inferkit::route(view(logits, T, E), {.top_k = 2, .num_threads = threads}, r),
                      Catch::Contains("logits[7][2]") && Catch::Contains("+inf"));
    logits = normal(T * E, 9);
    for (int e = 0; e < E; ++e) logits[3 * E + e] = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(inferkit::route(view(logits, T, E), {.top_k = 2, .num_threads = threads}, r),
                      Catch::Contains("logits[3][0]") && Catch::Contains("all be -inf"));
  }
  std::vector<float> nan_row = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  Routing r;
  CHECK_THROWS_WITH(inferkit::route_expert_choice(view(nan_row, 1, 2), {}, r), Catch::Contains("logits[0][1]"));
}

TEST_CASE("route: bad options name the parameter", "[moe][router][errors]") {
  const auto logits = normal(4 * 8, 1);
  const std::vector<float> bias3(3, 0.0f);
  std::vector<float> bias_nan(8, 0.0f);
  bias_nan[6] = std::numeric_limits<float>::quiet_NaN();
  Routing r;
  const auto fails = [&](RouterOptions o, const char* what) {
    CHECK_THROWS_AS(inferkit::route(view(logits, 4, 8), o, r), std::invalid_argument);
    CHECK_THROWS_WITH(inferkit::route(view(logits, 4, 8), o, r), Catch::Contains(what));
  };
  fails({.top_k = 0}, "top_k = 0");
  fails({.top_k = 9}, "top_k = 9");
  fails({.routed_scaling_factor = std::numeric_limits<float>::infinity()}, "routed_scaling_factor");
  fails({.selection_bias = bias3}, "selection_bias.size() = 3");
  fails({.selection_bias = bias_nan}, "selection_bias[6]");
  fails({.num_groups = 3}, "num_groups = 3");
  fails({.num_groups = 4, .topk_groups = 5}, "topk_groups = 5");
  fails({.top_k = 3, .num_groups = 4, .topk_groups = 1}, "topk_groups = 1");
  fails({.num_groups = 4, .topk_groups = 2, .group_score_experts = 3}, "group_score_experts = 3");
  CHECK_THROWS_WITH(inferkit::route(inferkit::MatrixView<const float>(nullptr, 0, 0), {}, r),
                    Catch::Contains("logits.cols()"));
  CHECK_THROWS_WITH(inferkit::route_expert_choice(view(logits, 4, 8), {.capacity_factor = 0.0}, r),
                    Catch::Contains("capacity_factor = 0"));
}

TEST_CASE("route: bitwise independent of the thread count", "[moe][router][threads]") {
  const int T = 1000, E = 64;
  const auto logits = normal(T * E, 21, 1.5f);
  const auto bias = normal(E, 22, 0.1f);
  for (auto scoring : {RouterScoring::softmax_topk, RouterScoring::sigmoid}) {
    RouterOptions o{
        .top_k = 8, .scoring = scoring, .renormalize = true, .selection_bias = bias, .num_groups = 8, .topk_groups = 4};
    Routing one, two;
    o.num_threads = 1;
    inferkit::route(view(logits, T, E), o, one);
    o.num_threads = 2;
    inferkit::route(view(logits, T, E), o, two);
    CHECK(one.expert_ids == two.expert_ids);
    CHECK(same_bits(one.weights, two.weights));
    CHECK(same_bits(one.mean_probability, two.mean_probability));
    CHECK(one.z_loss == two.z_loss);
    Routing ec1, ec2;
    inferkit::route_expert_choice(view(logits, T, E), {.capacity_factor = 2.0, .num_threads = 1}, ec1);
    inferkit::route_expert_choice(view(logits, T, E), {.capacity_factor = 2.0, .num_threads = 2}, ec2);
    CHECK(ec1.token_offsets == ec2.token_offsets);
    CHECK(ec1.expert_ids == ec2.expert_ids);
    CHECK(same_bits(ec1.weights, ec2.weights));
  }
}

TEST_CASE("route_expert_choice: each expert takes its top-C tokens (reference), ties to the lowest token",
          "[moe][router]") {
  const int T = 50, E = 6;
  const auto logits = normal(T * E, 31);
  for (double cf : {0.5, 1.0, 2.0, 100.0}) {
    Routing r;
    inferkit::route_expert_choice(view(logits, T, E), {.capacity_factor = cf, .routed_scaling_factor = 1.5f}, r);
    const int C = std::min(T, int(std::ceil(cf * T / E)));
    CHECK(r.top_k == 0);
    CHECK(r.num_slots() == E * C);
    // Reference: softmax per token, then per expert a stable full sort of the tokens.
    std::vector<std::vector<double>> p(T, std::vector<double>(E));
    for (int t = 0; t < T; ++t) {
      double m = -INFINITY, z = 0;
      for (int e = 0; e < E; ++e) m = std::max(m, double(logits[t * E + e]));
      for (int e = 0; e < E; ++e) z += std::exp(double(logits[t * E + e]) - m);
      for (int e = 0; e < E; ++e) p[t][e] = std::exp(double(logits[t * E + e]) - m) / z;
    }
    std::vector<std::vector<int>> want(T);  // experts per token in expert order
    std::vector<std::vector<double>> want_w(T);
    for (int e = 0; e < E; ++e) {
      std::vector<int> order(T);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a][e] > p[b][e]; });
      for (int j = 0; j < C; ++j) want[order[j]].push_back(e), want_w[order[j]].push_back(1.5 * p[order[j]][e]);
    }
    for (int t = 0; t < T; ++t) {
      INFO("cf " << cf << " token " << t);
      const auto [s0, s1] = r.slots(t);
      REQUIRE(s1 - s0 == Index(want[t].size()));
      for (Index s = s0; s < s1; ++s) {
        CHECK(r.expert_ids[s] == want[t][s - s0]);
        CHECK(r.weights[s] == Approx(want_w[t][s - s0]).epsilon(1e-6));
      }
    }
  }
  // All-equal scores: every expert takes tokens 0..C-1.
  std::vector<float> flat(std::size_t(10 * 4), 0.0f);
  Routing r;
  inferkit::route_expert_choice(view(flat, 10, 4), {.capacity = 3}, r);
  CHECK(r.token_offsets == std::vector<Index>{0, 4, 8, 12, 12, 12, 12, 12, 12, 12, 12});
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  // Capacity 0 and capacity above T.
  inferkit::route_expert_choice(view(flat, 10, 4), {.capacity = 0}, r);
  CHECK(r.num_slots() == 0);
  inferkit::route_expert_choice(view(flat, 10, 4), {.capacity = 50}, r);
  CHECK(r.num_slots() == 40);
}
