// sampling/grammar_constraint.hpp: a chain whose first stage is the grammar, sampling under random
// logits with the real deepseek-llm and llama-spm vocabularies (INFERKIT_TEST_VOCAB_DIR), always
// produces output that json.gbnf accepts and, for schemas, that python3-jsonschema judges valid;
// the state survives to_bytes / from_bytes (replayed), copies fork independently, rollback(n)
// after drafted tokens gives the mask of a state that never saw them; the greedy path
// (GrammarConstraint::greedy, masked_argmax) picks the token a naive loop over every id finds.

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar_test_util.hpp"
#include "grammar/schema_judge.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/grammar/json_schema.hpp"
#include "inferkit/io/gguf.hpp"
#include "inferkit/sampling/grammar_constraint.hpp"
#include "inferkit/sampling/sampler_chain.hpp"
#include "inferkit/tokenizer/gguf_vocabulary.hpp"

namespace ik = inferkit;
using ik::TokenId;

namespace {

// Samples one output: random normal logits, pushed (after `push_after` tokens) toward tokens that
// close structures so outputs end; the grammar stage first, then temperature and top-p.
std::string sample_output(const ik::SamplerChain& chain, const ik::TokenTrie& trie, std::mt19937& rng,
                          std::uint64_t seed, bool& finished) {
  ik::SamplerState state = chain.make_state();
  const ik::CounterRng stream(seed);
  std::normal_distribution<float> nd;
  std::vector<float> logits(trie.vocab_size());
  std::string out;
  finished = false;
  for (int step = 0; step < 400; ++step) {
    for (std::size_t i = 0; i < logits.size(); ++i) {
      logits[i] = 2.0f * nd(rng);
      if (step > 40) {
        const std::string_view b = trie.bytes(static_cast<TokenId>(i));
        if (trie.is_eos(static_cast<TokenId>(i)) ||
            (!b.empty() && b.find_first_of("\"]},0123456789") != std::string_view::npos && b.size() <= 2))
          logits[i] += 6.0f;
      }
    }
    const TokenId t = chain.sample(logits, {}, state, stream, static_cast<std::uint64_t>(step));
    chain.accept(state, t);
    if (trie.is_eos(t)) {
      finished = true;
      return out;
    }
    out += trie.bytes(t);
  }
  return out;
}

}  // namespace

TEST_CASE("GrammarConstraint: sampled outputs parse and validate with real vocabularies", "[sampling][grammar]") {
  const auto vdir = grammar_test::vocab_dir();
  const auto gdir = grammar_test::grammar_dir();
  if (!vdir || !gdir) {
    WARN("INFERKIT_TEST_VOCAB_DIR or INFERKIT_TEST_GRAMMAR_DIR is not set: skipped");
    return;
  }
  const auto cases = grammar_test::schema_cases();
  std::mt19937 rng(31);
  std::size_t finished_total = 0;
  for (const char* name : {"deepseek-llm", "llama-spm"}) {
    INFO(name);
    const auto file = ik::GgufFile::open(*vdir + "/ggml-vocab-" + std::string(name) + ".gguf");
    const ik::Vocabulary v = ik::vocabulary_from_gguf(file);
    const auto trie = std::make_shared<const ik::TokenTrie>(ik::TokenTrie::from_vocabulary(v));
    // json.gbnf
    const auto json =
        std::make_shared<const ik::Grammar>(ik::parse_gbnf(grammar_test::read_file(*gdir + "/json.gbnf")));
    ik::SamplerChain chain;
    chain.add(ik::GrammarConstraint{std::make_shared<const ik::TokenMasker>(json, trie)})
        .add(ik::Temperature{1.0f})
        .add(ik::TopP{0.95f});
    for (int i = 0; i < 4; ++i) {
      bool finished = false;
      const std::string out = sample_output(chain, *trie, rng, 100 + i, finished);
      INFO(out);
      if (finished) {
        CHECK(grammar_test::matches(*json, out));
        ++finished_total;
      }
    }
    // Schemas: every 7th of data/schemas.json, judged by python3-jsonschema.
    std::vector<std::pair<const ik::JsonValue*, std::vector<std::string>>> to_judge;
    for (std::size_t c = 0; c < cases.size(); c += 7) {
      INFO(cases[c].name);
      const auto g = std::make_shared<const ik::Grammar>(ik::parse_gbnf(ik::json_schema_to_gbnf(*cases[c].schema)));
      ik::SamplerChain sc;
      sc.add(ik::GrammarConstraint{std::make_shared<const ik::TokenMasker>(g, trie)}).add(ik::Temperature{0.9f});
      std::vector<std::string> outs;
      for (int i = 0; i < 2; ++i) {
        bool finished = false;
        std::string out = sample_output(sc, *trie, rng, 500 + c * 7 + static_cast<std::size_t>(i), finished);
        if (finished) outs.push_back(std::move(out));
      }
      finished_total += outs.size();
      to_judge.push_back({cases[c].schema, outs});
    }
    const auto verdicts = grammar_test::judge(to_judge);
    for (std::size_t k = 0; k < to_judge.size(); ++k)
      for (std::size_t j = 0; j < to_judge[k].second.size(); ++j) {
        INFO("sampled: " << to_judge[k].second[j]);
        CHECK(verdicts[k][j] == '1');
      }
  }
  CHECK(finished_total >= 20);
}

TEST_CASE("GrammarConstraint: bytes round trip, copies fork, rollback undoes drafted tokens", "[sampling][grammar]") {
  const auto g = std::make_shared<const ik::Grammar>(ik::json_schema_grammar(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array","items":{"type":"string"}}}})"));
  const ik::Vocabulary v =
      grammar_test::synthetic_vocabulary({"{\"a\":", "1", "2", ",\"b\":[", "\"x\"", "\"y", "z\"", ",", "]}", "}"});
  const auto trie = std::make_shared<const ik::TokenTrie>(ik::TokenTrie::from_vocabulary(v));
  const ik::GrammarConstraint stage{std::make_shared<const ik::TokenMasker>(g, trie)};
  ik::SamplerChain chain;
  chain.add(stage);
  auto id = [&](const char* p) { return *v.find(p); };
  ik::SamplerState s = chain.make_state();
  for (const char* p : {"{\"a\":", "1", "2", ",\"b\":["}) chain.accept(s, id(p));
  // Bytes: the tokens; the copy read back replays them to the same mask.
  ik::SamplerState back = ik::SamplerState::from_bytes(s.to_bytes());
  CHECK(back == s);
  std::vector<float> l1(v.size(), 0.0f), l2(v.size(), 0.0f);
  chain.apply(l1, {}, s, ik::CounterRng(1), 0);
  chain.apply(l2, {}, back, ik::CounterRng(1), 0);
  CHECK(l1 == l2);
  CHECK(l1[static_cast<std::size_t>(id("\"x\""))] == 0.0f);
  CHECK(std::isinf(l1[static_cast<std::size_t>(id("1"))]));
  // A copy forks: accepting on one leaves the other as it was.
  ik::SamplerState fork = s;
  chain.accept(fork, id("\"x\""));
  CHECK_FALSE(fork == s);
  std::vector<float> l3(v.size(), 0.0f);
  chain.apply(l3, {}, s, ik::CounterRng(1), 0);
  CHECK(l3 == l1);
  CHECK_THROWS_WITH(chain.accept(fork, id("1")), Catch::Contains("not allowed"));
  // Rollback of drafted tokens on the stage's own state.
  ik::GrammarConstraintState st = stage.initial_state();
  for (const char* p : {"{\"a\":", "1", ",\"b\":[", "\"y", "z\"", ",", "\"x\""}) stage.accept(st, {id(p), false, 0.0f});
  ik::GrammarConstraintState ref = stage.initial_state();
  for (const char* p : {"{\"a\":", "1", ",\"b\":["}) stage.accept(ref, {id(p), false, 0.0f});
  ik::GrammarConstraintState copy = st;
  stage.rollback(st, 4);
  CHECK(st == ref);
  ik::TokenBitset a, b;
  stage.matcher(st).fill_mask(a);
  stage.matcher(ref).fill_mask(b);
  CHECK(a == b);
  CHECK(copy.tokens.size() == 7);  // the copy kept its tokens
  CHECK_THROWS_AS(stage.rollback(st, 4), std::invalid_argument);
}

namespace {

// The greedy reference, independent of masks and tries: every id of the vocabulary tried with the
// byte matcher (an end-of-generation id where the output is complete), the largest logit in
// double, the lowest id among equal ones, -inf never; -1 when nothing is left.
TokenId naive_masked_argmax(const ik::ByteMatcher& state, const ik::TokenTrie& trie, const std::vector<float>& l) {
  TokenId best = -1;
  double best_v = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    const auto id = static_cast<TokenId>(i);
    const double v = l[i];
    if (v == -INFINITY) continue;
    bool allowed = false;
    if (trie.is_eos(id)) {
      allowed = state.is_complete();
    } else if (!trie.bytes(id).empty()) {
      ik::ByteMatcher probe = state;
      allowed = probe.accept_bytes(trie.bytes(id));
    }
    if (allowed && (best < 0 || v > best_v)) best = id, best_v = v;
  }
  return best;
}

// Greedy decoding of `steps` tokens under random logits of kind `kind` (0 normal, 1 ties: values
// in steps of 1/2, 2: also 40% -inf): the greedy stage's token equals the naive reference and
// grammar -> temperature(0) at every step. Returns the steps that ran.
int compare_greedy(const std::shared_ptr<const ik::TokenMasker>& masker, int steps, int kind, std::mt19937& rng) {
  const ik::TokenTrie& trie = masker->trie();
  ik::SamplerChain greedy, plain;
  greedy.add(ik::GrammarConstraint{masker, true});
  plain.add(ik::GrammarConstraint{masker}).add(ik::Temperature{0.0f});
  CHECK(greedy.describe().find(", greedy)") != std::string::npos);
  ik::SamplerState gs = greedy.make_state(), ps = plain.make_state();
  ik::GrammarMatcher ref(masker);  // the reference's state: advanced by the tokens chosen
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<double> u;
  std::vector<float> logits(trie.vocab_size());
  int ran = 0;
  for (int step = 0; step < steps && !ref.is_terminated(); ++step, ++ran) {
    for (float& x : logits) {
      x = kind == 0 ? nd(rng) : std::round(2.0f * nd(rng)) / 2.0f;
      if (kind == 2 && u(rng) < 0.4) x = -INFINITY;
    }
    const TokenId want = naive_masked_argmax(ref.state(), trie, logits);
    if (want < 0) {  // every allowed token at -inf: both stages refuse, naming it
      std::vector<float> a = logits, b = logits;
      CHECK_THROWS_WITH(greedy.sample(a, {}, gs, ik::CounterRng(7), static_cast<std::uint64_t>(step)),
                        Catch::Contains("grammar stage candidates"));
      CHECK_THROWS_WITH(plain.sample(b, {}, ps, ik::CounterRng(7), static_cast<std::uint64_t>(step)),
                        Catch::Contains("grammar stage candidates"));
      break;
    }
    std::vector<float> a = logits, b = logits;
    const TokenId got = greedy.sample(a, {}, gs, ik::CounterRng(7), static_cast<std::uint64_t>(step));
    const TokenId also = plain.sample(b, {}, ps, ik::CounterRng(7), static_cast<std::uint64_t>(step));
    INFO("step " << step << " kind " << kind);
    REQUIRE(got == want);
    REQUIRE(also == want);
    greedy.accept(gs, got);
    plain.accept(ps, also);
    ref.accept(want);
  }
  return ran;
}

}  // namespace

TEST_CASE("GrammarConstraint: the greedy path equals a naive masked argmax (ties, -inf, NaN)", "[sampling][grammar]") {
  std::mt19937 rng(30);
  // A synthetic vocabulary: pieces of JSON that split strings and numbers, so masks change.
  const auto g = std::make_shared<const ik::Grammar>(ik::json_schema_grammar(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array","items":{"type":"string"}}}})"));
  const ik::Vocabulary v =
      grammar_test::synthetic_vocabulary({"{", "}",     "{\"a\":", "\"a\"", ":", "1", "2",  "12", "-", ",\"b\":[", "\"",
                                          "x", "\"x\"", "\"y",     "z\"",   ",", "]", "]}", " ",  "[", "\"b\""});
  const auto trie = std::make_shared<const ik::TokenTrie>(ik::TokenTrie::from_vocabulary(v));
  const auto masker = std::make_shared<const ik::TokenMasker>(g, trie);
  int ran = 0;
  for (int rep = 0; rep < 200; ++rep) ran += compare_greedy(masker, 30, rep % 3, rng);
  CHECK(ran > 1000);
  // Only ties: every allowed token at one value, the lowest allowed id wins.
  {
    ik::SamplerChain greedy;
    greedy.add(ik::GrammarConstraint{masker, true});
    ik::SamplerState s = greedy.make_state();
    std::vector<float> flat(v.size(), 0.5f);
    const TokenId want = naive_masked_argmax(ik::ByteMatcher(*g), *trie, flat);
    CHECK(greedy.sample(flat, {}, s, ik::CounterRng(1), 0) == want);
  }
  // NaN or +inf in the row: refused naming the logit (the candidates' check), greedy or not.
  for (const float bad : {NAN, INFINITY}) {
    ik::SamplerChain greedy;
    greedy.add(ik::GrammarConstraint{masker, true});
    ik::SamplerState s = greedy.make_state();
    std::vector<float> l(v.size(), 0.0f);
    l[3] = bad;
    CHECK_THROWS_WITH(greedy.sample(l, {}, s, ik::CounterRng(1), 0), Catch::Contains("logits[3]"));
  }
  // After a stage that cut the row to a list (top-k before the grammar): the greedy stage equals
  // grammar -> temperature(0) on that list.
  for (int rep = 0; rep < 200; ++rep) {
    ik::SamplerChain greedy, plain;
    greedy.add(ik::TopK{8}).add(ik::GrammarConstraint{masker, true});
    plain.add(ik::TopK{8}).add(ik::GrammarConstraint{masker}).add(ik::Temperature{0.0f});
    ik::SamplerState gs = greedy.make_state(), ps = plain.make_state();
    std::normal_distribution<float> nd;
    std::vector<float> l(v.size());
    for (float& x : l) x = std::round(2.0f * nd(rng)) / 2.0f;
    std::vector<float> a = l, b = l;
    TokenId x = -2, y = -3;
    try {
      x = greedy.sample(a, {}, gs, ik::CounterRng(1), 0);
    } catch (const std::invalid_argument&) {
      x = -1;
    }
    try {
      y = plain.sample(b, {}, ps, ik::CounterRng(1), 0);
    } catch (const std::invalid_argument&) {
      y = -1;
    }
    CHECK(x == y);
  }
  // The real vocabularies: json.gbnf decoded greedily, every step against the naive loop.
  const auto vdir = grammar_test::vocab_dir();
  const auto gdir = grammar_test::grammar_dir();
  if (!vdir || !gdir) {
    WARN("INFERKIT_TEST_VOCAB_DIR or INFERKIT_TEST_GRAMMAR_DIR is not set: real vocabularies skipped");
    return;
  }
  const auto json = std::make_shared<const ik::Grammar>(ik::parse_gbnf(grammar_test::read_file(*gdir + "/json.gbnf")));
  int real = 0;
  for (const char* name : {"deepseek-llm", "llama-spm"}) {
    INFO(name);
    const auto file = ik::GgufFile::open(*vdir + "/ggml-vocab-" + std::string(name) + ".gguf");
    const auto rt =
        std::make_shared<const ik::TokenTrie>(ik::TokenTrie::from_vocabulary(ik::vocabulary_from_gguf(file)));
    const auto m = std::make_shared<const ik::TokenMasker>(json, rt);
    for (int kind = 0; kind < 3; ++kind) real += compare_greedy(m, 6, kind, rng);
  }
  CHECK(real >= 24);  // of 36: a kind-2 row may leave no allowed token early
}
