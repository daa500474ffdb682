// XTC and DRY: llama.cpp's published test vectors, the sort-based / quadratic references on
// random rows and histories, the coin's frequency, linear-time worst cases and bad parameters.
#include "sampling/sampling_test_util.hpp"

#include <map>
#include <random>

#include "inferkit/sampling/dry.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/xtc.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;

using test::log_probs;
using test::softmax;

namespace {

// A history of phrases drawn from a small pool, so repeats of every length occur.
std::vector<TokenId> phrase_history(std::size_t length, TokenId vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<TokenId>> pool(12);
  for (auto& p : pool) {
    p.resize(2 + rng() % 7);
    for (auto& t : p) t = static_cast<TokenId>(rng() % static_cast<unsigned>(vocab));
  }
  std::vector<TokenId> h;
  while (h.size() < length) {
    const auto& p = pool[rng() % pool.size()];
    h.insert(h.end(), p.begin(), p.end());
    if (rng() % 4 == 0) h.push_back(static_cast<TokenId>(rng() % static_cast<unsigned>(vocab)));
  }
  h.resize(length);
  return h;
}

}  // namespace

TEST_CASE("XTC reproduces llama.cpp's test vectors", "[sampling][xtc]") {
  // llama.cpp tests/test-sampling.cpp, test_xtc: probabilities .4 .3 .2 .1; the surviving tokens.
  const std::vector<float> probs{0.4f, 0.3f, 0.2f, 0.1f};
  const std::vector<std::pair<float, std::vector<int>>> cases{
      {0.09f, {3}}, {0.19f, {2, 3}}, {0.29f, {1, 2, 3}}, {0.39f, {0, 1, 2, 3}}};
  for (const auto& [threshold, kept] : cases) {
    INFO("threshold " << threshold);
    auto x = log_probs(probs);
    inferkit::Candidates c(x);
    inferkit::apply_xtc(c, {.threshold = threshold, .probability = 1.0f}, 0.5);
    c.materialize();
    std::vector<int> got;
    for (int i = 0; i < 4; ++i)
      if (x[static_cast<std::size_t>(i)] > -INFINITY) got.push_back(i);
    CHECK(got == kept);
  }
}

TEST_CASE("XTC equals the sort-based definition on dense and list paths", "[sampling][xtc]") {
  unsigned seed = 10;
  for (std::size_t n : {2u, 37u, 5000u, 128256u})
    for (float sigma : {1.0f, 4.0f, 9.0f})
      for (float threshold : {0.0f, 0.02f, 0.1f, 0.3f})
        for (Index min_keep : {1, 3, 40}) {
          // The reference ranks the whole row: the 128k vocabulary for two combinations only.
          if (n > 5000 && !(min_keep == 1 && (threshold == 0.02f || threshold == 0.1f))) continue;
          INFO("V = " << n << ", sigma = " << sigma << ", threshold = " << threshold << ", min_keep = " << min_keep);
          const inferkit::Xtc q{threshold, 0.7f, min_keep};
          for (double u : {0.1, 0.69, 0.71}) {
            auto x = test::random_logits(n, seed++, sigma, sigma == 4.0f, sigma == 9.0f ? 0.2 : 0.0);
            auto ref = x;
            inferkit::Candidates c(x);
            inferkit::apply_xtc(c, q, u);
            c.materialize();
            inferkit::reference::xtc(ref, q, u);
            CHECK(test::same_bits(x, ref));
          }
          // After top-k the candidates are a list.
          auto y = test::random_logits(n, seed++, sigma, true);
          auto yref = y;
          inferkit::Candidates c(y);
          inferkit::apply_top_k(c, 30);
          inferkit::apply_xtc(c, q, 0.0);
          c.materialize();
          inferkit::reference::top_k(yref, 30);
          inferkit::reference::xtc(yref, q, 0.0);
          CHECK(test::same_bits(y, yref));
        }
}

TEST_CASE("XTC's coin fires with the configured probability and is reproducible", "[sampling][xtc][statistics]") {
  const auto base = log_probs({0.5f, 0.3f, 0.15f, 0.05f});
  const inferkit::CounterRng rng(77, 3);
  const int n = 20000;
  for (float p : {0.0f, 0.25f, 1.0f}) {
    int fired = 0;
    for (int i = 0; i < n; ++i) {
      auto x = base;
      inferkit::apply_xtc(x, {.threshold = 0.1f, .probability = p}, rng, static_cast<std::uint64_t>(i));
      fired += x[0] == -INFINITY;
      auto again = base;  // same (seed, stream, index): same decision
      inferkit::apply_xtc(again, {.threshold = 0.1f, .probability = p}, rng, static_cast<std::uint64_t>(i));
      REQUIRE(test::same_bits(x, again));
    }
    const double sd = std::sqrt(n * p * (1 - p));
    CHECK(std::abs(fired - n * double(p)) <= 5 * sd + 0.5);
  }
}

TEST_CASE("XTC rejects bad parameters", "[sampling][xtc][errors]") {
  auto x = log_probs({0.5f, 0.5f});
  const inferkit::CounterRng rng(1);
  CHECK_THROWS_WITH(inferkit::apply_xtc(x, {.threshold = -0.1f}, rng, 0), Contains("xtc_threshold = -0.1"));
  CHECK_THROWS_WITH(inferkit::apply_xtc(x, {.threshold = NAN}, rng, 0), Contains("xtc_threshold"));
  CHECK_THROWS_WITH(inferkit::apply_xtc(x, {.probability = 1.5f}, rng, 0), Contains("xtc_probability = 1.5"));
  CHECK_THROWS_WITH(inferkit::apply_xtc(x, {.min_keep = 0}, rng, 0), Contains("min_keep = 0"));
}

TEST_CASE("DRY reproduces llama.cpp's test vectors", "[sampling][dry]") {
  // llama.cpp tests/test-sampling.cpp, test_dry: (probs, history, expected probs, multiplier,
  // base, allowed length, penalty_last_n, breakers).
  struct Case {
    std::vector<float> probs;
    std::vector<TokenId> history;
    std::vector<double> expected;
    float multiplier, base;
    Index allowed, last_n;
    std::vector<std::vector<TokenId>> breakers;
  };
  const std::vector<Case> cases{
      {{0.25f, 0.25f, 0.25f, 0.25f}, {0, 1}, {0.25, 0.25, 0.25, 0.25}, 1.0f, 1.1f, 2, 4, {}},
      {{0.25f, 0.25f, 0.25f, 0.25f}, {0, 1, 2, 0, 1}, {0.296923, 0.296923, 0.109232, 0.296923}, 1.0f, 1.1f, 2, 5, {}},
      {{0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0, 1, 3, 4, 0, 1}, {0.2, 0.2, 0.2, 0.2, 0.2}, 1.0f, 1.1f, 2, 6, {{3}}},
      {{0.2f, 0.2f, 0.2f, 0.2f, 0.2f},
       {0, 1, 2, 0, 1},
       {0.241818, 0.241818, 0.032727, 0.241818, 0.241818},
       2.0f,
       1.1f,
       2,
       5,
       {}},
      {{0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0, 1, 2, 3, 4, 0, 1}, {0.2, 0.2, 0.2, 0.2, 0.2}, 1.0f, 1.1f, 4, 7, {}},
  };
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    const Case& t = cases[k];
    auto x = log_probs(t.probs);
    inferkit::apply_dry(x, t.history, {t.multiplier, t.base, t.allowed, t.last_n, t.breakers});
    const auto p = softmax(x);
    for (std::size_t i = 0; i < p.size(); ++i) CHECK(p[i] == Approx(t.expected[i]).margin(1e-5));
  }
}

TEST_CASE("DRY's repeat lengths follow llama.cpp's worked example", "[sampling][dry]") {
  // "a b c c b c y a b c": emitting c extends "a b c" (3), b extends "c" (1), y extends "b c" (2).
  const std::vector<TokenId> h{0, 1, 2, 2, 1, 2, 3, 0, 1, 2};
  std::map<TokenId, Index> got;
  inferkit::for_each_dry_repeat(h, {.multiplier = 1.0f, .allowed_length = 1}, 4,
                                [&](TokenId t, Index n) { got[t] = n; });
  CHECK(got == std::map<TokenId, Index>{{1, 1}, {2, 3}, {3, 2}});
  // A run of one token: every prefix repeats, the longest repeat is L - 1 (linear time here,
  // quadratic for the naive scan).
  const std::vector<TokenId> run(4096, 5);
  got.clear();
  inferkit::for_each_dry_repeat(run, {.multiplier = 1.0f}, 8, [&](TokenId t, Index n) { got[t] = n; });
  CHECK(got == std::map<TokenId, Index>{{5, 4095}});
  // The penalty saturates (llama.cpp's exponent clamp, then the largest float): finite.
  std::vector<float> x(8, 0.0f);
  inferkit::apply_dry(x, run, {.multiplier = 3.0f, .base = 1.75f});
  CHECK(x[5] == -std::numeric_limits<float>::max());
  CHECK(x[4] == 0.0f);
}

TEST_CASE("DRY sequence breakers: single tokens are never penalized, multi-token ones limit the repeat",
          "[sampling][dry]") {
  std::map<TokenId, Index> got;
  const auto collect = [&](const std::vector<TokenId>& h, const inferkit::Dry& q) {
    got.clear();
    inferkit::for_each_dry_repeat(h, q, 20, [&](TokenId t, Index n) { got[t] = n; });
  };
  // "7 8 1 2 3" repeats, so 4 would extend a repeat of 5 tokens; the breaker 7 8 cuts it to the
  // 3 tokens after its last occurrence; an incomplete or absent breaker cuts nothing.
  const std::vector<TokenId> h{7, 8, 1, 2, 3, 4, 7, 8, 1, 2, 3};
  collect(h, {.multiplier = 1.0f});
  CHECK(got == std::map<TokenId, Index>{{4, 5}});
  collect(h, {.multiplier = 1.0f, .sequence_breakers = {{7, 8}}});
  CHECK(got == std::map<TokenId, Index>{{4, 3}});
  collect(h, {.multiplier = 1.0f, .sequence_breakers = {{7, 9}}});
  CHECK(got == std::map<TokenId, Index>{{4, 5}});
  // Breaker closer to the end: "2 3" only.
  collect({1, 2, 3, 4, 1, 7, 8, 2, 3}, {.multiplier = 1.0f, .sequence_breakers = {{7, 8}}});
  CHECK(got == std::map<TokenId, Index>{{4, 2}});
  // A breaker needs all its tokens: 7 followed by 1 is not "7 8"; the one-token breaker 7 is.
  collect({7, 1, 2, 3, 4, 7, 1, 2, 3}, {.multiplier = 1.0f, .sequence_breakers = {{7, 8}}});
  CHECK(got == std::map<TokenId, Index>{{4, 4}});
  collect({7, 1, 2, 3, 4, 7, 1, 2, 3}, {.multiplier = 1.0f, .sequence_breakers = {{7}}});
  CHECK(got == std::map<TokenId, Index>{{4, 3}});
  // Single-token breaker as the candidate: not penalized; as the last token: nothing repeats.
  collect({0, 1, 3, 4, 0, 1}, {.multiplier = 1.0f, .sequence_breakers = {{3}}});
  CHECK(got.empty());
  collect({0, 1, 3, 0, 1, 3}, {.multiplier = 1.0f, .sequence_breakers = {{3}}});
  CHECK(got.empty());
}

TEST_CASE("DRY equals the quadratic reference on random phrase histories", "[sampling][dry]") {
  unsigned seed = 500;
  for (TokenId vocab : {6, 40, 1000})
    for (std::size_t length : {0u, 1u, 3u, 64u, 700u})
      for (Index allowed : {0, 1, 2, 4})
        for (Index last_n : {-1, 0, 5, 300}) {
          INFO("V = " << vocab << ", L = " << length << ", allowed = " << allowed << ", last_n = " << last_n);
          const auto h = phrase_history(length, vocab, seed++);
          std::vector<std::vector<TokenId>> breakers;
          if (seed % 3 == 0) breakers = {{static_cast<TokenId>(seed % vocab)}, {h.empty() ? 0 : h[h.size() / 2], 1}};
          const inferkit::Dry q{0.8f, seed % 2 ? 1.75f : 1.0f, allowed, last_n, breakers};
          auto x = test::random_logits(static_cast<std::size_t>(vocab), seed, 2.0f, false, 0.1);
          auto ref = x;
          inferkit::apply_dry(x, h, q);
          inferkit::reference::dry(ref, h, q);
          CHECK(test::same_bits(x, ref));
          // On a candidate list (after top-k) only the survivors matter.
          auto y = test::random_logits(static_cast<std::size_t>(vocab), seed + 1, 2.0f);
          auto yref = y;
          inferkit::Candidates c(y);
          inferkit::apply_top_k(c, 5);
          inferkit::apply_dry(c, h, q);
          inferkit::apply_top_k(c, 3);
          c.materialize();
          inferkit::reference::top_k(yref, 5);
          inferkit::reference::dry(yref, h, q);
          inferkit::reference::top_k(yref, 3);
          CHECK(test::same_bits(y, yref));
        }
}

TEST_CASE("DRY rejects bad parameters and out-of-vocabulary ids", "[sampling][dry][errors]") {
  std::vector<float> x(10, 0.0f);
  const std::vector<TokenId> h{1, 2, 1, 2};
  CHECK_THROWS_WITH(inferkit::apply_dry(x, h, {.multiplier = -1.0f}), Contains("dry_multiplier = -1"));
  CHECK_THROWS_WITH(inferkit::apply_dry(x, h, {.multiplier = 1.0f, .base = 0.5f}), Contains("dry_base = 0.5"));
  CHECK_THROWS_WITH(inferkit::apply_dry(x, h, {.multiplier = 1.0f, .allowed_length = -1}),
                    Contains("dry_allowed_length = -1"));
  CHECK_THROWS_WITH(inferkit::apply_dry(x, h, {.multiplier = 1.0f, .penalty_last_n = -2}),
                    Contains("dry_penalty_last_n = -2"));
  CHECK_THROWS_WITH(inferkit::apply_dry(x, h, {.multiplier = 1.0f, .sequence_breakers = {{}}}),
                    Contains("dry_sequence_breakers[0].size()"));
  CHECK_THROWS_WITH(inferkit::apply_dry(x, h, {.multiplier = 1.0f, .sequence_breakers = {{3, -1}}}),
                    Contains("dry_sequence_breakers[0][1] = -1"));
  CHECK_THROWS_AS(inferkit::apply_dry(x, h, {.multiplier = 1.0f, .sequence_breakers = {{10}}}), std::out_of_range);
  const std::vector<TokenId> bad{1, 2, 12, 2};
  CHECK_THROWS_WITH(inferkit::apply_dry(x, bad, {.multiplier = 1.0f}), Contains("history[2] = 12"));
  CHECK_THROWS_AS(inferkit::apply_dry(x, bad, {.multiplier = 1.0f}), std::out_of_range);
}
