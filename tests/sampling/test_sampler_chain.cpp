#include "sampling/sampling_test_util.hpp"

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "inferkit/grammar/gbnf.hpp"

#include "inferkit/sampling/presets.hpp"
#include "inferkit/sampling/sampler_chain.hpp"

using Catch::Contains;
using inferkit::TokenId;

namespace {
inferkit::SamplingParams chain_params() {
  inferkit::SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  return p;
}
}  // namespace

TEST_CASE("presets describe the order they run", "[sampling][chain]") {
  const auto p = chain_params();
  CHECK(inferkit::presets::huggingface(p).describe() ==
        "repetition_penalty(1.1) -> temperature(0.8) -> top_k(40) -> top_p(0.95) -> min_p(0.05) -> draw");
  CHECK(inferkit::presets::llama_cpp(p).describe() ==
        "repetition_penalty(1.1) -> top_k(40) -> top_p(0.95) -> min_p(0.05) -> temperature(0.8) -> draw");
  CHECK(inferkit::presets::huggingface({}).describe() == "draw");
  CHECK_THROWS_WITH(inferkit::SamplerChain().add(inferkit::TopP{2.0f}), Contains("top_p = 2"));
}

TEST_CASE("the chain equals its processors applied one by one, then the reference draw", "[sampling][chain]") {
  const auto p = chain_params();
  const inferkit::CounterRng rng(42, 7);
  for (const auto& chain : {inferkit::presets::huggingface(p), inferkit::presets::llama_cpp(p)}) {
    for (std::size_t n : {50u, 32000u, 128256u}) {
      for (unsigned trial = 0; trial < 5; ++trial) {
        INFO(chain.describe() << ", V = " << n << ", trial " << trial);
        auto x = test::random_logits(n, 900 + trial, 2.0f, trial % 2 == 1);
        std::vector<TokenId> history{1, 2, 3, 2, static_cast<TokenId>(n - 1)};
        auto ref = x;
        std::vector<float> dist(n);
        const TokenId got = chain.sample(x, history, rng, trial, dist);
        // Reference, step by step in the chain's order.
        for (const auto& proc : chain.processors()) {
          if (auto* q = std::get_if<inferkit::RepetitionPenalty>(&proc))
            inferkit::apply_repetition_penalty(ref, history, q->penalty);
          if (auto* q = std::get_if<inferkit::Temperature>(&proc)) inferkit::reference::temperature(ref, q->value);
          if (auto* q = std::get_if<inferkit::TopK>(&proc)) inferkit::reference::top_k(ref, q->k);
          if (auto* q = std::get_if<inferkit::TopP>(&proc)) inferkit::reference::top_p(ref, q->p, q->min_keep);
          if (auto* q = std::get_if<inferkit::MinP>(&proc)) inferkit::reference::min_p(ref, q->p, q->min_keep);
        }
        CHECK(test::same_bits(x, ref));
        CHECK(got == inferkit::reference::draw(ref, rng.uniform_double(trial)));
        double total = 0;
        bool zero_outside = true;
        for (std::size_t i = 0; i < n; ++i) {
          total += dist[i];
          zero_outside = zero_outside && (ref[i] > -INFINITY || dist[i] == 0.0f);
        }
        CHECK(zero_outside);
        CHECK(total == Approx(1.0).epsilon(1e-5));
        CHECK(dist[static_cast<std::size_t>(got)] > 0.0f);
      }
    }
  }
}

TEST_CASE("temperature 0 in a chain is greedy", "[sampling][chain]") {
  auto p = chain_params();
  p.temperature = 0.0f;
  auto x = test::random_logits(1000, 5, 3.0f, true);
  const TokenId best = inferkit::reference::ranked(x).front();
  const auto chain = inferkit::presets::huggingface(p);
  for (std::uint64_t i = 0; i < 5; ++i) {
    auto y = x;
    CHECK(chain.sample(y, {}, inferkit::CounterRng(i), i) == best);
  }
}

TEST_CASE("the draw follows the distribution (chi-square)", "[sampling][chain][statistics]") {
  // Five tokens with probabilities .4 .25 .2 .1 .05 after softmax.
  const std::vector<double> probs{0.4, 0.25, 0.2, 0.1, 0.05};
  std::vector<float> logits;
  for (double q : probs) logits.push_back(static_cast<float>(std::log(q)));
  const inferkit::SamplerChain chain;
  const inferkit::CounterRng rng(2026);
  const int n = 200000;
  std::vector<int> counts(5, 0);
  for (int i = 0; i < n; ++i) {
    auto x = logits;
    ++counts[static_cast<std::size_t>(chain.sample(x, {}, rng, static_cast<std::uint64_t>(i)))];
  }
  double chi2 = 0;
  for (int t = 0; t < 5; ++t) chi2 += (counts[t] - n * probs[t]) * (counts[t] - n * probs[t]) / (n * probs[t]);
  CHECK(chi2 < 18.47);  // chi-square, 4 degrees of freedom, p = 0.001
}

TEST_CASE("same seed, same tokens, whatever the thread count", "[sampling][chain][threads]") {
  const auto chain = inferkit::presets::huggingface(chain_params());
  const inferkit::Index rows = 16, vocab = 5000;
  auto base = test::random_logits(static_cast<std::size_t>(rows * vocab), 77, 2.0f);
  std::vector<std::uint64_t> streams(rows);
  for (inferkit::Index r = 0; r < rows; ++r) streams[r] = static_cast<std::uint64_t>(100 + r);
  std::vector<TokenId> one(rows), two(rows), again(rows);
  auto a = base, b = base, c = base;
  chain.sample_batch({a.data(), rows, vocab}, {}, 9, streams, 3, one, 1);
  chain.sample_batch({b.data(), rows, vocab}, {}, 9, streams, 3, two, 2);
  chain.sample_batch({c.data(), rows, vocab}, {}, 9, streams, 3, again, 2);
  CHECK(one == two);
  CHECK(one == again);
  // Each row matches sampling that row alone with its stream.
  for (inferkit::Index r = 0; r < rows; ++r) {
    std::vector<float> row(base.begin() + r * vocab, base.begin() + (r + 1) * vocab);
    CHECK(chain.sample(row, {}, inferkit::CounterRng(9, streams[r]), 3) == one[r]);
  }
}

TEST_CASE("a chain that filters every token reports it", "[sampling][chain][errors]") {
  inferkit::SamplerChain chain;
  chain.add(inferkit::BannedTokens{{0, 1, 2}});
  std::vector<float> x{1.0f, 2.0f, 3.0f};
  CHECK_THROWS_WITH(chain.sample(x, {}, inferkit::CounterRng(1), 0), Contains("filtered"));
}

TEST_CASE("the chain's errors name the stages and the bad thread count", "[sampling][chain][errors]") {
  std::vector<float> x(10, 0.0f);
  const inferkit::CounterRng rng(1);
  auto counting = inferkit::SamplerChain().add(inferkit::TopK{3}).add(inferkit::MinNewTokens{2, {0}});
  CHECK_THROWS_WITH(counting.sample(x, {}, rng, 0), Contains("stateful stages (min_new_tokens)"));
  auto xtc = inferkit::SamplerChain().add(inferkit::TopK{3}).add(inferkit::Xtc{0.1f, 0.5f});
  CHECK_THROWS_WITH(xtc.apply(x, {}), Contains("the xtc stage reads the request's random stream"));
  const auto chain = inferkit::presets::huggingface(chain_params());
  std::vector<float> rows(20, 0.0f);
  std::vector<std::uint64_t> streams{1, 2};
  std::vector<TokenId> out(2);
  for (int bad : {-1, inferkit::kMaxThreads + 1, 65535})
    CHECK_THROWS_WITH(chain.sample_batch({rows.data(), 2, 10}, {}, 9, streams, 0, out, bad),
                      Contains("num_threads = " + std::to_string(bad)));
  // The bound itself is accepted (one row: the loop runs serially, no thread is started).
  CHECK_NOTHROW(chain.sample_batch({rows.data(), 1, 10}, {}, 9, std::span(streams).first(1), 0, std::span(out).first(1),
                                   inferkit::kMaxThreads));
}

TEST_CASE("rollback(state, n) equals a fresh state fed the kept tokens (grammar and generated-count rules)",
          "[sampling][chain][rollback]") {
  // A grammar over a small vocabulary: lists of a/b words, then "." (EOS only after it).
  const std::vector<std::string> words = {"a", "b", "ab", " ", " a", " b", "ba", ".", "a.", "<eos>"};
  std::vector<std::string_view> bytes(words.begin(), words.end());
  bytes.back() = {};  // the EOS id has no bytes
  const auto trie = std::make_shared<const inferkit::TokenTrie>(bytes, std::vector<TokenId>{9});
  const auto grammar = std::make_shared<const inferkit::Grammar>(inferkit::parse_gbnf(R"(root ::= w (" " w)* "."
w ::= [ab]+)"));
  const auto masker = std::make_shared<const inferkit::TokenMasker>(grammar, trie);
  inferkit::SamplerChain chain;
  chain.add(inferkit::GrammarConstraint{masker})
      .add(inferkit::BeginSuppressTokens{{1}})
      .add(inferkit::ExponentialDecayLengthPenalty{3, 1.5f, {9}})
      .add(inferkit::RepetitionPenalty{1.3f, 8})
      .add(inferkit::Temperature{1.0f});
  REQUIRE(chain.can_rollback());
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const auto row = [&] {
    std::vector<float> l(words.size());
    for (float& x : l) x = nd(rng);
    return l;
  };
  for (int trial = 0; trial < 200; ++trial) {
    inferkit::SamplerState s = chain.make_state();
    std::vector<TokenId> kept;  // the tokens the state should hold
    const inferkit::CounterRng stream(static_cast<std::uint64_t>(trial));
    for (int round = 0; round < 6; ++round) {
      // Draft up to 4 tokens (stopping at EOS), then reject a random suffix of them.
      std::vector<TokenId> drafted;
      for (int i = 0; i < 4 && (kept.empty() || kept.back() != 9) && (drafted.empty() || drafted.back() != 9); ++i) {
        std::vector<TokenId> history = kept;
        history.insert(history.end(), drafted.begin(), drafted.end());
        auto l = row();
        const TokenId t = chain.sample(l, history, s, stream, history.size());
        chain.accept(s, t);
        drafted.push_back(t);
      }
      const std::size_t keep = std::uniform_int_distribution<std::size_t>(0, drafted.size())(rng);
      chain.rollback(s, drafted.size() - keep);
      kept.insert(kept.end(), drafted.begin(), drafted.begin() + static_cast<std::ptrdiff_t>(keep));
      // The reference: a fresh state that accepted only the kept tokens.
      inferkit::SamplerState ref = chain.make_state();
      for (TokenId t : kept) chain.accept(ref, t);
      INFO("trial " << trial << " round " << round << " kept " << kept.size());
      REQUIRE(s == ref);
      REQUIRE(s.generated() == static_cast<inferkit::Index>(kept.size()));
      if (!kept.empty() && kept.back() == 9) break;  // terminated: nothing is allowed after EOS
      const auto l = row();
      auto a = l, b = l;
      chain.apply(a, kept, s, stream, 0);
      chain.apply(b, kept, ref, stream, 0);
      REQUIRE(a == b);
    }
  }
  // Bounds and rules without a rollback hook: refused, the state unchanged.
  inferkit::SamplerState s = chain.make_state();
  chain.accept(s, 0);
  const inferkit::SamplerState before = s;
  CHECK_THROWS_WITH(chain.rollback(s, 2), Catch::Contains("rollback count"));
  CHECK(s == before);
  inferkit::SamplerChain mirostat;
  mirostat.add(inferkit::Mirostat{});
  CHECK_FALSE(mirostat.can_rollback());
  inferkit::SamplerState m = mirostat.make_state();
  mirostat.accept(m, 3);
  const inferkit::SamplerState m0 = m;
  CHECK_THROWS_WITH(mirostat.rollback(m, 1), Catch::Contains("mirostat"));
  CHECK(m == m0);
}
