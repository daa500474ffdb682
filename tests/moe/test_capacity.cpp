// Capacity, overflow policies, rerouting and statistics (moe/capacity.hpp) against a naive
// reference and closed forms.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "inferkit/moe/capacity.hpp"
#include "moe_test_util.hpp"

using namespace moe_test;
using inferkit::CapacityOptions;
using inferkit::kDroppedExpert;
using inferkit::MoeStats;
using inferkit::OverflowPolicy;
using inferkit::RouterOptions;
using inferkit::RouterScoring;
using inferkit::Routing;

namespace {

// Reference admission: rounds by slot rank; within a round tokens by index (arrival) or by their
// largest weight, descending, stable (priority); an expert holding C assignments drops the rest.
// Returns the expected expert ids and the dropped slots in processing order.
std::vector<std::int32_t> ref_admit(const Routing& r, Index C, OverflowPolicy policy, std::vector<Index>* dropped) {
  std::vector<std::int32_t> ids = r.expert_ids;
  std::vector<int> order(std::size_t(r.num_tokens));
  std::iota(order.begin(), order.end(), 0);
  if (policy == OverflowPolicy::priority) {
    std::vector<float> best(order.size(), -INFINITY);
    for (int t = 0; t < r.num_tokens; ++t)
      for (Index s = r.token_offsets[t]; s < r.token_offsets[t + 1]; ++s) best[t] = std::max(best[t], r.weights[s]);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return best[a] > best[b]; });
  }
  std::vector<Index> count(std::size_t(r.num_experts), 0);
  for (Index j = 0; j < 64; ++j)
    for (int t : order)
      if (r.token_offsets[t] + j < r.token_offsets[t + 1]) {
        const Index s = r.token_offsets[t] + j;
        if (count[ids[s]] < C) {
          ++count[ids[s]];
        } else {
          ids[s] = kDroppedExpert;
          dropped->push_back(s);
        }
      }
  return ids;
}

MoeStats ref_stats(const Routing& before, const std::vector<std::int32_t>& after, Index C) {
  MoeStats st;
  const Index E = before.num_experts;
  st.capacity = C;
  st.routed_per_expert.assign(std::size_t(E), 0);
  st.tokens_per_expert.assign(std::size_t(E), 0);
  for (auto e : before.expert_ids) ++st.routed_per_expert[e], ++st.routed_assignments;
  for (auto e : after)
    if (e != kDroppedExpert) ++st.tokens_per_expert[e], ++st.kept_assignments;
  st.dropped_assignments = st.routed_assignments - st.kept_assignments;
  for (Index t = 0; t < before.num_tokens; ++t) {
    int lost = 0, had = 0;
    for (Index s = before.token_offsets[t]; s < before.token_offsets[t + 1]; ++s)
      ++had, lost += after[s] == kDroppedExpert;
    st.tokens_with_drops += lost > 0;
    st.dropped_tokens += had > 0 && lost == had;
  }
  double aux = 0;
  for (Index e = 0; e < E; ++e)
    aux += double(st.routed_per_expert[e]) / double(st.routed_assignments) * before.mean_probability[e];
  st.aux_loss = double(E) * aux;
  const Index mx = *std::max_element(st.tokens_per_expert.begin(), st.tokens_per_expert.end());
  st.max_mean_load_ratio = st.kept_assignments ? double(mx) / (double(st.kept_assignments) / double(E)) : 0.0;
  return st;
}

void check_stats(const MoeStats& got, const MoeStats& want) {
  CHECK(got.capacity == want.capacity);
  CHECK(got.routed_per_expert == want.routed_per_expert);
  CHECK(got.tokens_per_expert == want.tokens_per_expert);
  CHECK(got.routed_assignments == want.routed_assignments);
  CHECK(got.kept_assignments == want.kept_assignments);
  CHECK(got.dropped_assignments == want.dropped_assignments);
  CHECK(got.dropped_tokens == want.dropped_tokens);
  CHECK(got.tokens_with_drops == want.tokens_with_drops);
  CHECK(got.aux_loss == Approx(want.aux_loss).epsilon(1e-12));
  CHECK(got.max_mean_load_ratio == Approx(want.max_mean_load_ratio).epsilon(1e-12));
}

// A routing of one expert per slot given by hand (weights, no router statistics needed).
Routing manual(Index E, const std::vector<std::vector<std::int32_t>>& ids, const std::vector<std::vector<float>>& w) {
  Routing r;
  r.num_tokens = Index(ids.size());
  r.num_experts = E;
  r.top_k = ids.empty() ? 1 : Index(ids[0].size());
  r.token_offsets = {0};
  for (std::size_t t = 0; t < ids.size(); ++t) {
    r.expert_ids.insert(r.expert_ids.end(), ids[t].begin(), ids[t].end());
    r.weights.insert(r.weights.end(), w[t].begin(), w[t].end());
    r.token_offsets.push_back(Index(r.expert_ids.size()));
  }
  r.mean_probability.assign(std::size_t(E), 1.0 / double(E));
  return r;
}

}  // namespace

TEST_CASE("expert_capacity: C = ceil(cf * T * k / E); cf <= 0 is dropless", "[moe][capacity]") {
  CHECK(inferkit::expert_capacity(1.0, 10 * 2, 4) == 5);
  CHECK(inferkit::expert_capacity(1.25, 4096 * 8, 64) == 640);
  CHECK(inferkit::expert_capacity(0.5, 3 * 1, 2) == 1);  // ceil(0.75)
  CHECK(inferkit::expert_capacity(1.0, 0, 8) == 0);      // T = 0
  CHECK(inferkit::expert_capacity(2.0, 7, 1) == 14);     // E = 1
  CHECK(inferkit::expert_capacity(0.0, 100, 4) == inferkit::kDropless);
  CHECK(inferkit::expert_capacity(-1.0, 100, 4) == inferkit::kDropless);
  CHECK_THROWS_WITH(inferkit::expert_capacity(std::nan(""), 1, 1), Catch::Contains("capacity_factor"));
  CHECK_THROWS_WITH(inferkit::expert_capacity(1.0, 1, 0), Catch::Contains("num_experts = 0"));
}

TEST_CASE("apply_capacity: both overflow policies match the reference admission and statistics", "[moe][capacity]") {
  const int T = 60, E = 8;
  const auto logits = normal(T * E, 41, 1.5f);
  for (int k : {1, 2, 3}) {
    for (double cf : {0.5, 1.0, 1.25, 4.0}) {
      for (auto policy : {OverflowPolicy::arrival_order, OverflowPolicy::priority}) {
        Routing r;
        inferkit::route(view(logits, T, E), {.top_k = k}, r);
        const Routing before = r;
        MoeStats st;
        inferkit::apply_capacity(r, {.capacity_factor = cf, .policy = policy}, &st);
        const Index C = Index(std::ceil(cf * T * k / E));
        std::vector<Index> dropped;
        const auto want = ref_admit(before, C, policy, &dropped);
        INFO("k " << k << " cf " << cf << " policy " << int(policy));
        CHECK(r.expert_ids == want);
        CHECK(r.weights == before.weights);
        check_stats(st, ref_stats(before, want, C));
        CHECK(st.rerouted_assignments == 0);
        CHECK(st.z_loss == before.z_loss);
        CHECK(st.drop_rate() == Approx(double(dropped.size()) / double(T * k)));
      }
    }
  }
}

TEST_CASE("apply_capacity: arrival keeps the earliest tokens, priority the highest weights", "[moe][capacity]") {
  const auto base = manual(2, {{0}, {0}, {0}, {1}}, {{0.2f}, {0.9f}, {0.5f}, {0.1f}});
  Routing a = base, p = base;
  inferkit::apply_capacity(a, {.capacity = 1, .policy = OverflowPolicy::arrival_order});
  inferkit::apply_capacity(p, {.capacity = 1, .policy = OverflowPolicy::priority});
  CHECK(a.expert_ids == std::vector<std::int32_t>{0, -1, -1, 1});
  CHECK(p.expert_ids == std::vector<std::int32_t>{-1, 0, -1, 1});
  // Second choices are admitted only after every first choice (rounds), whatever the token order.
  Routing r = manual(2, {{0, 1}, {1, 0}}, {{0.6f, 0.4f}, {0.7f, 0.3f}});
  MoeStats st;
  inferkit::apply_capacity(r, {.capacity = 1}, &st);
  CHECK(r.expert_ids == std::vector<std::int32_t>{0, -1, 1, -1});
  CHECK(st.dropped_tokens == 0);
  CHECK(st.tokens_with_drops == 2);
}

TEST_CASE("apply_capacity: edge cases (C = 0, k = E, T = 0, E = 1, empty experts, dropless)", "[moe][capacity]") {
  const int T = 12, E = 4;
  const auto logits = normal(T * E, 51);
  Routing r;
  MoeStats st;
  inferkit::route(view(logits, T, E), {.top_k = 2}, r);
  inferkit::apply_capacity(r, {.capacity = 0}, &st);  // everything dropped
  CHECK(std::all_of(r.expert_ids.begin(), r.expert_ids.end(), [](auto e) { return e == kDroppedExpert; }));
  CHECK(st.dropped_assignments == 2 * T);
  CHECK(st.dropped_tokens == T);
  CHECK(st.kept_assignments == 0);
  CHECK(st.max_mean_load_ratio == 0.0);
  CHECK(st.drop_rate() == 1.0);

  inferkit::route(view(logits, T, E), {.top_k = E}, r);  // k = E with cf 1: C = T, no drop
  inferkit::apply_capacity(r, {.capacity_factor = 1.0}, &st);
  CHECK(st.capacity == T);
  CHECK(st.dropped_assignments == 0);
  CHECK(st.tokens_per_expert == std::vector<Index>(E, T));
  CHECK(st.max_mean_load_ratio == 1.0);
  CHECK(st.aux_loss == Approx(1.0));  // f_e = 1/E for all e: E * sum P_e / E = 1

  inferkit::route(inferkit::MatrixView<const float>(nullptr, 0, E), {.top_k = 2}, r);  // T = 0
  inferkit::apply_capacity(r, {.capacity_factor = 1.0}, &st);
  CHECK(st.capacity == 0);
  CHECK(st.routed_assignments == 0);
  CHECK(st.aux_loss == 0.0);
  CHECK(st.drop_rate() == 0.0);

  std::vector<float> one(T, 0.0f);  // E = 1
  inferkit::route(view(one, T, 1), {.top_k = 1}, r);
  inferkit::apply_capacity(r, {.capacity_factor = 0.5}, &st);
  CHECK(st.capacity == 6);
  CHECK(st.dropped_assignments == 6);
  CHECK(st.aux_loss == Approx(1.0));

  // Every token prefers expert 0 (others empty): dropless keeps all, ratio E, aux = E * P_0.
  std::vector<float> skew(std::size_t(T * E), 0.0f);
  for (int t = 0; t < T; ++t) skew[t * E] = 3.0f;
  inferkit::route(view(skew, T, E), {.top_k = 1}, r);
  inferkit::apply_capacity(r, {}, &st);
  CHECK(st.capacity == inferkit::kDropless);
  CHECK(st.dropped_assignments == 0);
  CHECK(st.tokens_per_expert == std::vector<Index>{T, 0, 0, 0});
  CHECK(st.max_mean_load_ratio == Approx(double(E)));
  const double p0 = std::exp(3.0) / (std::exp(3.0) + 3.0);
  CHECK(st.aux_loss == Approx(E * p0));
}

TEST_CASE("apply_capacity: balanced routing gives aux loss exactly 1 whatever P (Switch's minimum)",
          "[moe][capacity]") {
  const int E = 8, T = 64;
  auto logits = normal(T * E, 61, 0.3f);
  for (int t = 0; t < T; ++t) logits[t * E + t % E] += 10.0f;  // token t prefers expert t mod E
  Routing r;
  MoeStats st;
  inferkit::route(view(logits, T, E), {.top_k = 1}, r);
  inferkit::apply_capacity(r, {}, &st);
  CHECK(st.tokens_per_expert == std::vector<Index>(E, T / E));
  CHECK(st.aux_loss == Approx(1.0).epsilon(1e-12));
  CHECK(st.max_mean_load_ratio == 1.0);
}

TEST_CASE("apply_capacity: rerouting moves dropped slots to the next best expert with room", "[moe][capacity]") {
  const int T = 40, E = 8;
  const auto logits = normal(T * E, 71, 2.0f);
  const auto bias = normal(E, 72, 0.2f);
  for (auto scoring : {RouterScoring::softmax_topk, RouterScoring::topk_softmax, RouterScoring::sigmoid}) {
    for (int groups : {1, 2}) {
      for (auto policy : {OverflowPolicy::arrival_order, OverflowPolicy::priority}) {
        RouterOptions ro{.top_k = 2,
                         .scoring = scoring,
                         .renormalize = scoring == RouterScoring::sigmoid,
                         .routed_scaling_factor = 1.5f,
                         .selection_bias = bias,
                         .num_groups = groups,
                         .topk_groups = 1};
        Routing r;
        inferkit::route(view(logits, T, E), ro, r);
        const Routing before = r;
        const Index C = 9;  // below T * k / E = 10
        std::vector<Index> dropped;
        auto want = ref_admit(before, C, policy, &dropped);
        std::vector<float> want_w = before.weights;
        std::vector<Index> count(E, 0);
        for (auto e : want)
          if (e != kDroppedExpert) ++count[e];
        Index rerouted = 0;
        for (Index s : dropped) {
          const Index t = s / 2;
          RouterOptions all = ro;
          all.top_k = groups == 1 ? E : E / 2;  // the full ranking of the allowed experts
          const RefToken rank = ref_route_token(logits.data() + t * E, E, all);
          for (int j = 2; j < int(all.top_k); ++j) {
            const int e = rank.ids[j];
            if (count[e] >= C || want[2 * t] == e || want[2 * t + 1] == e) continue;
            want[s] = e;
            ++count[e];
            ++rerouted;
            // Same normalization as the token's own slots: w_new / w_first = raw(e) / raw(first).
            const float* l = logits.data() + t * E;
            const int e0 = before.expert_ids[2 * t];
            const double ratio = scoring == RouterScoring::sigmoid
                                     ? (1 + std::exp(-double(l[e0]))) / (1 + std::exp(-double(l[e])))
                                     : std::exp(double(l[e]) - double(l[e0]));
            want_w[s] = float(double(before.weights[2 * t]) * ratio);
            break;
          }
        }
        MoeStats st;
        inferkit::apply_capacity(r, {.capacity = C, .policy = policy, .reroute = true}, view(logits, T, E), ro, &st);
        INFO("scoring " << int(scoring) << " groups " << groups << " policy " << int(policy));
        CHECK(!dropped.empty());
        CHECK(rerouted > 0);
        CHECK(r.expert_ids == want);
        for (int s = 0; s < r.num_slots(); ++s) CHECK(r.weights[s] == Approx(want_w[s]).epsilon(1e-6));
        CHECK(st.rerouted_assignments == rerouted);
        CHECK(st.dropped_assignments == Index(dropped.size()) - rerouted);
        for (int e = 0; e < E; ++e) CHECK(st.tokens_per_expert[e] <= C);
      }
    }
  }
}

TEST_CASE("apply_capacity: errors name the parameter", "[moe][capacity][errors]") {
  const auto logits = normal(6 * 4, 81);
  Routing r;
  inferkit::route(view(logits, 6, 4), {.top_k = 2}, r);
  Routing copy = r;
  CHECK_THROWS_WITH(inferkit::apply_capacity(copy, {.capacity = 1, .reroute = true}), Catch::Contains("reroute"));
  CHECK_THROWS_WITH(inferkit::apply_capacity(copy, {.capacity = -2}), Catch::Contains("capacity = -2"));
  CHECK_THROWS_WITH(inferkit::apply_capacity(copy, {.capacity_factor = INFINITY}), Catch::Contains("capacity_factor"));
  CHECK_THROWS_WITH(inferkit::apply_capacity(copy, {.capacity = 1, .reroute = true}, view(logits, 3, 8), {.top_k = 2}),
                    Catch::Contains("logits.rows()"));
  inferkit::apply_capacity(copy, {.reroute = true});  // dropless: nothing to reroute, allowed
  Routing ec;
  inferkit::route_expert_choice(view(logits, 6, 4), {.capacity = 2}, ec);
  CHECK_THROWS_WITH(inferkit::apply_capacity(ec, {.capacity = 1, .reroute = true}, view(logits, 6, 4), {.top_k = 2}),
                    Catch::Contains("token-choice"));
  copy = r;
  copy.expert_ids[3] = 4;
  CHECK_THROWS_AS(inferkit::apply_capacity(copy, {}), std::out_of_range);
  CHECK_THROWS_WITH(inferkit::apply_capacity(copy, {}), Catch::Contains("routing.expert_ids[3] = 4"));
  copy = r;
  copy.token_offsets[2] = 1;
  CHECK_THROWS_WITH(inferkit::apply_capacity(copy, {}), Catch::Contains("routing.token_offsets[2] = 1"));
  copy = r;
  copy.weights.pop_back();
  CHECK_THROWS_WITH(inferkit::apply_capacity(copy, {}), Catch::Contains("routing.weights.size()"));
}
