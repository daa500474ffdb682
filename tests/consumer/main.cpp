// A consumer of the installed package: the README's decode step (dense cache, attention,
// sampler chain), checked against closed forms, plus an LSE merge.
#include <cmath>
#include <cstdio>
#include <vector>

#include <inferkit/inferkit.hpp>

int main() {
  bool ok = true;
  // Merge: scores {0} with value {1, 0} and {log 3} with value {0, 1}: weights 1/4 and 3/4.
  std::vector<float> a{1.0f, 0.0f}, b{0.0f, 1.0f}, merged(2);
  const float lse = inferkit::merge_attention_states(a, 0.0f, b, std::log(3.0f), merged);
  ok = ok && std::abs(merged[0] - 0.25f) < 1e-6f && std::abs(merged[1] - 0.75f) < 1e-6f &&
       std::abs(lse - std::log(4.0f)) < 1e-6f;

  // The README's decode step. With identical keys every position gets the same score, so the
  // output is the mean of the values: (0 + 1 + 2) / 3 = 1 in every dimension.
  const inferkit::Index layers = 1, kv_heads = 2, heads = 4, dim = 8;
  inferkit::DenseKvCache<inferkit::BFloat16> cache(layers, kv_heads, dim, 16);
  for (int t = 0; t < 3; ++t) {
    std::vector<float> k(kv_heads * dim, 0.5f), v(kv_heads * dim, float(t));
    cache.append(0, {k.data(), 1, kv_heads, dim}, {v.data(), 1, kv_heads, dim});
  }
  std::vector<float> q(heads * dim, 0.3f), out(heads * dim);
  inferkit::attention(inferkit::Tensor3View<const float>(q.data(), 1, heads, dim), cache.source(0),
                      {out.data(), 1, heads, dim});
  for (float x : out) ok = ok && std::abs(x - 1.0f) < 1e-5f;

  // Sampling: temperature 0 is greedy (ties to the lowest id); a seeded draw is reproducible.
  std::vector<float> logits{0.1f, 2.0f, -1.0f, 2.0f};
  const std::vector<inferkit::TokenId> history{3};
  auto greedy = logits;
  const auto g = inferkit::presets::huggingface({.temperature = 0.0f}).sample(greedy, {}, inferkit::CounterRng(1), 0);
  ok = ok && g == 1;
  const auto chain = inferkit::presets::huggingface({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f});
  auto l1 = logits, l2 = logits;
  const auto t1 = chain.sample(l1, history, inferkit::CounterRng(42), 7);
  const auto t2 = chain.sample(l2, history, inferkit::CounterRng(42), 7);
  ok = ok && t1 == t2 && t1 >= 0 && t1 < 4;

  std::printf("inferkit %s consumer: merge {%g, %g}, attention %g, greedy %d, sampled %d -> %s\n",
              inferkit::kVersionString, merged[0], merged[1], out[0], g, t1, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
