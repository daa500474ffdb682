#pragma once
// Shared helpers of the moe tests: random logits and naive fp64 references written from the
// papers' definitions, per token, with full sorts (independent of moe/'s partial selections).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "inferkit/moe/router.hpp"

namespace moe_test {

using inferkit::Index;

inline std::vector<float> normal(std::size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline inferkit::MatrixView<const float> view(const std::vector<float>& v, Index rows, Index cols) {
  return {v.data(), rows, cols};
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// One token's reference routing.
struct RefToken {
  std::vector<int> ids;
  std::vector<double> weights;
  std::vector<double> prob;  // P_e contribution
  double lse = 0;
};

/// Naive routing of one token (router.hpp's definitions, written out literally).
inline RefToken ref_route_token(const float* l, int E, const inferkit::RouterOptions& o) {
  RefToken r;
  double m = -INFINITY;
  for (int e = 0; e < E; ++e) m = std::max(m, double(l[e]));
  double z = 0;
  for (int e = 0; e < E; ++e) z += std::exp(double(l[e]) - m);
  r.lse = m + std::log(z);
  std::vector<double> g(E);
  for (int e = 0; e < E; ++e) g[e] = std::exp(double(l[e]) - r.lse);  // softmax
  r.prob = g;
  if (o.scoring == inferkit::RouterScoring::sigmoid) {
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += (g[e] = 1.0 / (1.0 + std::exp(-double(l[e]))));
    for (int e = 0; e < E; ++e) r.prob[e] = g[e] / sum;
  }
  std::vector<double> s(E);
  for (int e = 0; e < E; ++e) s[e] = g[e] + (o.selection_bias.empty() ? 0.0 : double(o.selection_bias[e]));
  std::vector<bool> allowed(E, true);
  if (o.num_groups > 1) {
    const int G = int(o.num_groups), gs = E / G;
    std::vector<double> gscore(G);
    for (int gi = 0; gi < G; ++gi) {
      std::vector<double> v(s.begin() + gi * gs, s.begin() + (gi + 1) * gs);
      std::sort(v.rbegin(), v.rend());
      gscore[gi] = 0;
      for (int j = 0; j < o.group_score_experts; ++j) gscore[gi] += v[j];
    }
    std::vector<int> gorder(G);
    std::iota(gorder.begin(), gorder.end(), 0);
    std::stable_sort(gorder.begin(), gorder.end(), [&](int a, int b) { return gscore[a] > gscore[b]; });
    std::fill(allowed.begin(), allowed.end(), false);
    for (int j = 0; j < o.topk_groups; ++j)
      for (int e = gorder[j] * gs; e < (gorder[j] + 1) * gs; ++e) allowed[e] = true;
  }
  std::vector<int> order;
  for (int e = 0; e < E; ++e)
    if (allowed[e]) order.push_back(e);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b]; });
  r.ids.assign(order.begin(), order.begin() + o.top_k);
  for (int e : r.ids) r.weights.push_back(g[e]);
  if (o.scoring == inferkit::RouterScoring::topk_softmax) {
    double mk = -INFINITY, sum = 0;
    for (int e : r.ids) mk = std::max(mk, double(l[e]));
    for (int e : r.ids) sum += std::exp(double(l[e]) - mk);
    for (std::size_t j = 0; j < r.ids.size(); ++j) r.weights[j] = std::exp(double(l[r.ids[j]]) - mk) / sum;
  } else if (o.renormalize) {
    double sum = 0;
    for (double w : r.weights) sum += w;
    for (double& w : r.weights) w /= sum;
  }
  for (double& w : r.weights) w *= double(o.routed_scaling_factor);
  return r;
}

/// Weighted sum reference of combine: out[t] = sum over kept slots of w * y[slot].
inline std::vector<double> ref_combine(const inferkit::Routing& r, const std::vector<std::vector<double>>& slot_out,
                                       Index d) {
  std::vector<double> out(std::size_t(r.num_tokens * d), 0.0);
  for (Index t = 0; t < r.num_tokens; ++t)
    for (Index s = r.token_offsets[t]; s < r.token_offsets[t + 1]; ++s)
      if (r.expert_ids[s] != inferkit::kDroppedExpert)
        for (Index i = 0; i < d; ++i)
          out[std::size_t(t * d + i)] += double(r.weights[s]) * slot_out[std::size_t(s)][std::size_t(i)];
  return out;
}

}  // namespace moe_test
