// The registry (processor.hpp) and the rule hooks (decoding_rule.hpp): for every registered rule,
// a chain holding it gives what the rule's own free function gives on a row (the independent
// path: apply_top_k(span), apply_xtc(span, ...), ...), alone and behind a top-k that leaves the
// candidates sparse, through every apply / sample overload; its describe() text is the one
// written here by hand and starts with its registered name; a chain of every rule runs them in
// order. A rule registered without an Example below does not compile.
#include "sampling/sampling_test_util.hpp"

#include <random>
#include <string>
#include <utility>
#include <variant>

#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/sampling/processor.hpp"
#include "inferkit/sampling/sampler_chain.hpp"

using inferkit::Index;
using inferkit::TokenId;
namespace ik = inferkit;

namespace {

constexpr TokenId kEos = 2;

// What the free function of a rule gets besides the row (the chain passes the same).
struct Context {
  std::vector<TokenId> history;
  Index generated = 0;
  ik::CounterRng rng{0};
  std::uint64_t draw = 0;
};

// Example<R>: a rule with parameters that make it act, the describe() text of those parameters
// (typed here), and the rule applied by its own free function on a row.
template <class R>
struct Example;

template <>
struct Example<ik::Temperature> {
  static ik::Temperature rule() { return {0.7f}; }
  static constexpr const char* kText = "temperature(0.7)";
  static void free(std::span<float> x, const Context&, const ik::Temperature& q) { ik::apply_temperature(x, q.value); }
};
template <>
struct Example<ik::TopK> {
  static ik::TopK rule() { return {40}; }
  static constexpr const char* kText = "top_k(40)";
  static void free(std::span<float> x, const Context&, const ik::TopK& q) { ik::apply_top_k(x, q.k); }
};
template <>
struct Example<ik::TopP> {
  static ik::TopP rule() { return {0.9f, 3}; }
  static constexpr const char* kText = "top_p(0.9)";
  static void free(std::span<float> x, const Context&, const ik::TopP& q) { ik::apply_top_p(x, q.p, q.min_keep); }
};
template <>
struct Example<ik::MinP> {
  static ik::MinP rule() { return {0.05f, 2}; }
  static constexpr const char* kText = "min_p(0.05)";
  static void free(std::span<float> x, const Context&, const ik::MinP& q) { ik::apply_min_p(x, q.p, q.min_keep); }
};
template <>
struct Example<ik::Typical> {
  static ik::Typical rule() { return {0.9f, 1}; }
  static constexpr const char* kText = "typical_p(0.9)";
  static void free(std::span<float> x, const Context&, const ik::Typical& q) {
    ik::apply_typical(x, q.mass, q.min_keep);
  }
};
template <>
struct Example<ik::RepetitionPenalty> {
  static ik::RepetitionPenalty rule() { return {1.3f, 20}; }
  static constexpr const char* kText = "repetition_penalty(1.3, 20)";
  static void free(std::span<float> x, const Context& k, const ik::RepetitionPenalty& q) {
    const std::span<const TokenId> h(k.history);
    ik::apply_repetition_penalty(x, h.subspan(h.size() - 20), q.penalty);
  }
};
template <>
struct Example<ik::FrequencyPresencePenalty> {
  static ik::FrequencyPresencePenalty rule() { return {0.4f, 0.3f, -1}; }
  static constexpr const char* kText = "frequency_presence_penalty(0.4, 0.3)";
  static void free(std::span<float> x, const Context& k, const ik::FrequencyPresencePenalty& q) {
    ik::apply_frequency_presence_penalty(x, k.history, q.frequency, q.presence);
  }
};
template <>
struct Example<ik::NoRepeatNgram> {
  static ik::NoRepeatNgram rule() { return {2}; }
  static constexpr const char* kText = "no_repeat_ngram(2)";
  static void free(std::span<float> x, const Context& k, const ik::NoRepeatNgram& q) {
    ik::apply_no_repeat_ngram(x, k.history, q.n);
  }
};
template <>
struct Example<ik::LogitBias> {
  static ik::LogitBias rule() { return {{{5, 4.0f}, {7, -1.5f}, {11, -INFINITY}}}; }
  static constexpr const char* kText = "logit_bias(3)";
  static void free(std::span<float> x, const Context&, const ik::LogitBias& q) { ik::apply_logit_bias(x, q.biases); }
};
template <>
struct Example<ik::BannedTokens> {
  static ik::BannedTokens rule() { return {{3, 4, 9}}; }
  static constexpr const char* kText = "banned_tokens(3)";
  static void free(std::span<float> x, const Context&, const ik::BannedTokens& q) {
    ik::apply_banned_tokens(x, q.tokens);
  }
};
template <>
struct Example<ik::AllowedTokens> {  // every id of the vocabulary but the multiples of 3
  static ik::AllowedTokens rule(std::size_t vocab) {
    ik::AllowedTokens a;
    for (TokenId t = 0; t < static_cast<TokenId>(vocab); ++t)
      if (t % 3 != 0) a.tokens.push_back(t);
    return a;
  }
  static std::string text(std::size_t vocab) {
    return "allowed_tokens(" + std::to_string(vocab - (vocab + 2) / 3) + ")";
  }
  static void free(std::span<float> x, const Context&, const ik::AllowedTokens& q) {
    ik::apply_allowed_tokens(x, q.tokens);
  }
};
template <>
struct Example<ik::DynamicTemperature> {
  static ik::DynamicTemperature rule() { return {0.8f, 0.5f, 1.5f}; }
  static constexpr const char* kText = "dynamic_temperature(0.8, 0.5, 1.5)";
  static void free(std::span<float> x, const Context&, const ik::DynamicTemperature& q) {
    ik::apply_dynamic_temperature(x, q);
  }
};
template <>
struct Example<ik::TopNSigma> {
  static ik::TopNSigma rule() { return {1.5f}; }
  static constexpr const char* kText = "top_n_sigma(1.5)";
  static void free(std::span<float> x, const Context&, const ik::TopNSigma& q) { ik::apply_top_n_sigma(x, q.n); }
};
template <>
struct Example<ik::Xtc> {
  static ik::Xtc rule() { return {0.02f, 1.0f, 1}; }
  static constexpr const char* kText = "xtc(0.02, 1)";
  static void free(std::span<float> x, const Context& k, const ik::Xtc& q) { ik::apply_xtc(x, q, k.rng, k.draw); }
};
template <>
struct Example<ik::Dry> {
  static ik::Dry rule() { return {0.8f, 1.75f, 2, 200, {{13}}}; }
  static constexpr const char* kText = "dry(0.8, 1.75, 2, 200)";
  static void free(std::span<float> x, const Context& k, const ik::Dry& q) { ik::apply_dry(x, k.history, q); }
};
template <>
struct Example<ik::Mirostat> {
  static ik::Mirostat rule() { return {2, 4.0f, 0.2f, 100}; }
  static constexpr const char* kText = "mirostat_v2(4, 0.2)";
  static void free(std::span<float> x, const Context&, const ik::Mirostat& q) {
    ik::apply_mirostat(x, q, 2.0f * q.tau);  // the state at admission: mu = 2 tau
  }
};
template <>
struct Example<ik::EpsilonCutoff> {
  static ik::EpsilonCutoff rule() { return {2e-3f, 2}; }
  static constexpr const char* kText = "epsilon_cutoff(0.002)";
  static void free(std::span<float> x, const Context&, const ik::EpsilonCutoff& q) { ik::apply_epsilon_cutoff(x, q); }
};
template <>
struct Example<ik::EtaCutoff> {
  static ik::EtaCutoff rule() { return {1e-2f, 1}; }
  static constexpr const char* kText = "eta_cutoff(0.01)";
  static void free(std::span<float> x, const Context&, const ik::EtaCutoff& q) { ik::apply_eta_cutoff(x, q); }
};
template <>
struct Example<ik::MinNewTokens> {
  static ik::MinNewTokens rule() { return {2, {kEos, 0}}; }
  static constexpr const char* kText = "min_new_tokens(2)";
  static void free(std::span<float> x, const Context& k, const ik::MinNewTokens& q) {
    ik::apply_min_new_tokens(x, q, k.generated);
  }
};
template <>
struct Example<ik::ExponentialDecayLengthPenalty> {
  static ik::ExponentialDecayLengthPenalty rule() { return {1, 1.4f, {kEos}}; }
  static constexpr const char* kText = "exponential_decay_length_penalty(1, 1.4)";
  static void free(std::span<float> x, const Context& k, const ik::ExponentialDecayLengthPenalty& q) {
    ik::apply_exponential_decay_length_penalty(x, q, k.generated);
  }
};
template <>
struct Example<ik::BadWords> {
  static ik::BadWords rule() { return {{{21, 22}, {8}, {kEos}}, {kEos}}; }
  static constexpr const char* kText = "bad_words(3)";
  static void free(std::span<float> x, const Context& k, const ik::BadWords& q) {
    ik::apply_bad_words(x, k.history, q);
  }
};
template <>
struct Example<ik::SequenceBias> {
  static ik::SequenceBias rule() { return {{{{21, 30}, 2.5f}, {{6}, -3.0f}, {{40, 21, 31}, -INFINITY}}}; }
  static constexpr const char* kText = "sequence_bias(3)";
  static void free(std::span<float> x, const Context& k, const ik::SequenceBias& q) {
    ik::apply_sequence_bias(x, k.history, q);
  }
};
template <>
struct Example<ik::BeginSuppressTokens> {
  static ik::BeginSuppressTokens rule() { return {{kEos, 1}}; }
  static constexpr const char* kText = "begin_suppress_tokens(2)";
  static void free(std::span<float> x, const Context& k, const ik::BeginSuppressTokens& q) {
    ik::apply_begin_suppress_tokens(x, q, k.generated);
  }
};
template <>
struct Example<ik::GrammarConstraint> {  // token i stands for the digit i % 10; the grammar wants [0-8]+ (no 9, no EOS)
  static ik::GrammarConstraint rule(std::size_t vocab) {
    std::vector<std::string> bytes(vocab);
    for (std::size_t i = 0; i < vocab; ++i) bytes[i] = i == kEos ? std::string() : std::to_string(i % 10);
    const std::vector<std::string_view> views(bytes.begin(), bytes.end());
    return {std::make_shared<const ik::TokenMasker>(
        std::make_shared<const ik::Grammar>(ik::parse_gbnf("root ::= [0-8]+")),
        std::make_shared<const ik::TokenTrie>(views, std::vector<TokenId>{kEos}))};
  }
  static constexpr const char* kText = "grammar(2)";
  static void free(std::span<float> x, const Context&, const ik::GrammarConstraint& q) {
    ik::TokenBitset mask(x.size());  // per token through the byte matcher, not the trie walk
    const ik::ByteMatcher start(q.masker->grammar());
    for (std::size_t i = 0; i < x.size(); ++i)
      if (q.masker->allows(start, static_cast<TokenId>(i))) mask.set(static_cast<TokenId>(i));
    ik::apply_grammar_mask(x, mask);
  }
};

// The example rule for a vocabulary of `vocab` tokens, and its describe() text.
template <class R>
R example_rule(std::size_t vocab) {
  if constexpr (requires { Example<R>::rule(vocab); })
    return Example<R>::rule(vocab);
  else
    return Example<R>::rule();
}
template <class R>
std::string example_text(std::size_t vocab) {
  if constexpr (requires { Example<R>::text(vocab); })
    return Example<R>::text(vocab);
  else
    return Example<R>::kText;
}

// Calls f.template operator()<R>() for every registered rule R, in registration order.
template <class F, std::size_t... I>
void for_each_rule(F&& f, std::index_sequence<I...>) {
  (f.template operator()<std::variant_alternative_t<I, ik::Processor>>(), ...);
}
template <class F>
void for_each_rule(F&& f) {
  for_each_rule(f, std::make_index_sequence<std::variant_size_v<ik::Processor>>{});
}

// A history that ends inside a repeated phrase (DRY, no-repeat n-gram and the sequence rules
// all find something), with ids below 64.
std::vector<TokenId> history() {
  std::vector<TokenId> h;
  std::mt19937 rng(8);
  const std::vector<TokenId> phrase{40, 21, 30, 17, 5};
  while (h.size() < 120) {
    h.insert(h.end(), phrase.begin(), phrase.end());
    h.push_back(static_cast<TokenId>(rng() % 64));
  }
  h.insert(h.end(), {40, 21});
  return h;
}

}  // namespace

TEST_CASE("processor: a chain of one registered rule equals the rule's free function", "[sampling][processor]") {
  for_each_rule([&]<class R>() {
    INFO("rule " << R::kName);
    for (std::size_t n : {600u, 32000u})
      for (bool sparse : {false, true})
        for (Index generated : {0, 3})
          for (unsigned trial = 0; trial < 3; ++trial) {
            INFO("V = " << n << (sparse ? ", behind top_k(300)" : "") << ", generated " << generated << ", trial "
                        << trial);
            const Context k{history(), generated, ik::CounterRng(77, trial), trial};
            const R q = example_rule<R>(n);
            ik::SamplerChain chain;
            if (sparse) chain.add(ik::TopK{300});
            chain.add(q);
            const auto base = test::random_logits(n, 300 + trial, trial == 2 ? 6.0f : 2.0f, trial == 1);
            auto want = base;
            if (sparse) ik::apply_top_k(want, 300);
            Example<R>::free(want, k, q);
            // apply() with a state and a stream: every rule.
            ik::SamplerState state = chain.make_state(generated);
            auto got = base;
            chain.apply(got, k.history, state, k.rng, k.draw);
            CHECK(test::same_bits(got, want));
            // The draw: the reference categorical draw of the free function's row.
            got = base;
            std::vector<float> dist(n);
            const TokenId t = chain.sample(got, k.history, state, k.rng, k.draw, dist);
            CHECK(test::same_bits(got, want));
            CHECK(t == ik::reference::draw(want, k.rng.uniform_double(k.draw)));
            CHECK(state.pending_token() == t);
            // The stateless overloads for rules that read no state (and no stream for apply()).
            if constexpr (!R::kStateful) {
              got = base;
              CHECK(chain.sample(got, k.history, k.rng, k.draw) == t);
              CHECK(test::same_bits(got, want));
              if (!ik::rule_needs_rng(q)) {
                got = base;
                chain.apply(got, k.history);
                CHECK(test::same_bits(got, want));
              }
            }
            CHECK(chain.stateful() == R::kStateful);
            // accept(): the count, and the rule's own state through its hook.
            chain.accept(state, t);
            CHECK(state.generated() == generated + 1);
            if constexpr (std::is_same_v<R, ik::Mirostat>) {
              const double surprise = -std::log2(double(dist[static_cast<std::size_t>(t)]));
              CHECK(state.mirostat_mu() == Approx(2.0 * q.tau - q.eta * (surprise - q.tau)).epsilon(1e-5));
            }
          }
  });
}

TEST_CASE("processor: describe() is each rule's text, starting with its registered name", "[sampling][processor]") {
  ik::SamplerChain all;
  std::string want;
  for_each_rule([&]<class R>() {
    const R q = example_rule<R>(600);
    const std::string text = example_text<R>(600);
    CHECK(q.describe() == text);
    CHECK(text.rfind(std::string(R::kName), 0) == 0);
    CHECK(ik::SamplerChain().add(q).describe() == text + " -> draw");
    all.add(q);
    want += text + " -> ";
  });
  CHECK(all.describe() == want + "draw");
  CHECK(all.stateful());
  CHECK(all.processors().size() == std::variant_size_v<ik::Processor>);
}

TEST_CASE("processor: a chain of every registered rule runs them in the order added", "[sampling][processor]") {
  for (std::size_t n : {600u, 32000u})
    for (unsigned trial = 0; trial < 3; ++trial) {
      INFO("V = " << n << ", trial " << trial);
      ik::SamplerChain chain;
      for_each_rule([&]<class R>() { chain.add(example_rule<R>(n)); });
      const Context k{history(), 0, ik::CounterRng(5, trial), trial + 10};
      const auto base = test::random_logits(n, 40 + trial, 3.0f, trial == 1);
      auto want = base;
      for_each_rule([&]<class R>() { Example<R>::free(want, k, example_rule<R>(n)); });
      auto state = chain.make_state();
      auto got = base;
      const TokenId t = chain.sample(got, k.history, state, k.rng, k.draw);
      CHECK(test::same_bits(got, want));
      CHECK(t == ik::reference::draw(want, k.rng.uniform_double(k.draw)));
    }
}

TEST_CASE("processor: each rule's validate() hook rejects what its free function rejects", "[sampling][processor]") {
  using Catch::Contains;
  // add() runs the hook: the message names the parameter and the value.
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::Temperature{-1.0f}), Contains("temperature = -1"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::TopP{0.5f, 0}), Contains("min_keep = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::MinP{1.5f}), Contains("min_p = 1.5"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::Typical{0.0f}), Contains("typical_p = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::RepetitionPenalty{0.0f}), Contains("repetition_penalty = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::RepetitionPenalty{1.1f, -2}), Contains("penalty_last_n = -2"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::FrequencyPresencePenalty{NAN, 0.0f}), Contains("frequency_penalty"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::NoRepeatNgram{0}), Contains("no_repeat_ngram_size = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::DynamicTemperature{1.0f, -0.5f}), Contains("dynatemp_range = -0.5"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::TopNSigma{INFINITY}), Contains("top_n_sigma = inf"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::Xtc{0.1f, 1.5f}), Contains("xtc_probability = 1.5"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::Dry{0.8f, 0.5f}), Contains("dry_base = 0.5"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::Mirostat{3}), Contains("mirostat = 3"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::EpsilonCutoff{1.0f}), Contains("epsilon_cutoff = 1"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::EtaCutoff{0.0f}), Contains("eta_cutoff = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::MinNewTokens{3, {}}), Contains("eos_token_ids.size() = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::ExponentialDecayLengthPenalty{0, 0.0f}),
                    Contains("exponential_decay_factor = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::BadWords{{{}}}), Contains("bad_words[0].size() = 0"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::SequenceBias{{{{1}, NAN}}}), Contains("sequence_bias[0].bias"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::BeginSuppressTokens{{1, -4}}),
                    Contains("begin_suppress_tokens[1] = -4"));
  // Token lists are checked against the vocabulary when applied (out_of_range names the entry).
  std::vector<float> x(10, 0.0f);
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::BannedTokens{{1, 10}}).apply(x), Contains("banned[1] = 10"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::LogitBias{{{12, 1.0f}}}).apply(x), Contains("logit_bias[0].token = 12"));
  CHECK_THROWS_WITH(ik::SamplerChain().add(ik::AllowedTokens{{-1}}).apply(x), Contains("allowed[0] = -1"));
}
