// Grammar-constrained requests through the scheduler with preemption by recompute: the engine
// loop below keeps one SamplerChain (grammar stage first) and one SamplerState per request, as
// the llama2c serve loop does, over the fake model of serving_test_util.hpp (logits a function of
// the request's prefix hash). Requests of several kinds (sampled, greedy, unconstrained) share a
// pool small enough that running requests are preempted and resumed. Each request's output must
// equal the same request decoded alone by a literal loop (no scheduler), its grammar state must
// survive the preemption (kept as is, or dropped and read back from SamplerState bytes, which
// replays the tokens), and an output that ended with EOS must be a sentence of the grammar.

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar_test_util.hpp"
#include "inferkit/grammar/gbnf.hpp"
#include "inferkit/sampling/grammar_constraint.hpp"
#include "inferkit/sampling/sampler_chain.hpp"
#include "inferkit/serving/scheduler.hpp"
#include "serving/serving_test_util.hpp"

namespace ik = inferkit;
using ik::Index;
using ik::RequestId;
using ik::TokenId;

namespace {

// A JSON-like list of quoted words and numbers; pieces that split its tokens differently.
constexpr const char* kGrammar = R"(root ::= "[" item ("," item)* "]"
item ::= "\"" [a-c]+ "\"" | [1-9] [0-9]?)";
const std::vector<std::string> kPieces = {"[", "]",  ",", "\"",  "a",   "b",    "c",   "ab", "\"a", "c\"", "1",
                                          "2", "12", "0", ",\"", "\"]", "b\",", "[\"", "[1", "9]",  "bc"};

struct Setup {
  std::shared_ptr<const ik::Grammar> grammar = std::make_shared<const ik::Grammar>(ik::parse_gbnf(kGrammar));
  ik::Vocabulary vocab = grammar_test::synthetic_vocabulary(kPieces);
  std::shared_ptr<const ik::TokenTrie> trie =
      std::make_shared<const ik::TokenTrie>(ik::TokenTrie::from_vocabulary(vocab));
  std::shared_ptr<const ik::TokenMasker> masker = std::make_shared<const ik::TokenMasker>(grammar, trie);
  int vocab_size() const { return static_cast<int>(vocab.size()); }
};

// Kind 0: grammar -> temperature 0.8 -> top-p 0.9; 1: the greedy grammar stage; 2: no grammar.
ik::SamplerChain chain_of(const Setup& s, int kind) {
  ik::SamplerChain c;
  if (kind == 0) c.add(ik::GrammarConstraint{s.masker}).add(ik::Temperature{0.8f}).add(ik::TopP{0.9f});
  if (kind == 1) c.add(ik::GrammarConstraint{s.masker, true});
  if (kind == 2) c.add(ik::Temperature{0.8f});
  return c;
}

// The fake model's logits after a prefix with hash h and `generated` tokens: pseudo-random in
// [0, 4), EOS and "]" pushed up as the output grows so that outputs end.
void logits_of(std::uint64_t h, Index generated, const Setup& s, std::vector<float>& out) {
  out.resize(static_cast<std::size_t>(s.vocab_size()));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(test::splitmix(h ^ (0x9E37ull * (i + 1))) >> 40) / float(1 << 24) * 4.0f;
  const float push = 0.15f * static_cast<float>(generated);
  out[2] += push;  // EOS
  out[static_cast<std::size_t>(*s.vocab.find("]"))] += push;
}

struct Solo {
  std::vector<TokenId> output;
  ik::FinishReason reason;
};

// The request decoded alone: the fake model's prefix hash, the chain, a fresh state.
Solo decode_alone(const ik::RequestParams& p, const ik::SamplerChain& chain, const Setup& s) {
  ik::SamplerState state = chain.make_state();
  std::uint64_t h = test::identity_hash(p.identity);
  std::vector<TokenId> seq = p.prompt, gen;
  for (std::size_t q = 0; q < seq.size(); ++q) h = test::step_hash(h, seq[q], static_cast<Index>(q));
  std::vector<float> logits;
  for (;;) {
    logits_of(h, static_cast<Index>(gen.size()), s, logits);
    const TokenId t = chain.sample(logits, seq, state, ik::CounterRng(p.seed), gen.size());
    chain.accept(state, t);
    gen.push_back(t);
    h = test::step_hash(h, t, static_cast<Index>(seq.size()));
    seq.push_back(t);
    if (t == 2) return {gen, ik::FinishReason::kEos};
    if (static_cast<Index>(gen.size()) == p.max_new_tokens) return {gen, ik::FinishReason::kLength};
  }
}

struct Run {
  Index grammar_preemptions = 0;  // preemptions of requests with a grammar, over the run
  Index checked_resumes = 0;      // resumed grammar requests whose state was checked
  Index sentences = 0;            // grammar requests that ended with EOS (checked against the grammar)
};

// Serves `n` requests through a scheduler over a pool of `blocks` pages of 4; `via_bytes`: at a
// preemption the engine drops the request's state and keeps only its bytes.
Run serve(const Setup& s, int n, Index blocks, bool via_bytes, std::uint64_t seed) {
  ik::BlockPool<float> pool({1, 1, test::kHeadDim, 4, blocks});
  ik::PrefixTrie<float> trie(pool);
  ik::Scheduler<float> sched(pool, &trie, {.max_batched_tokens = 16, .max_sequences = 4, .max_prefill_chunk = 8});
  std::map<RequestId, ik::RequestParams> params;
  std::map<RequestId, int> kind;
  std::map<RequestId, ik::SamplerChain> chains;
  std::map<RequestId, ik::SamplerState> states;
  std::map<RequestId, std::vector<std::uint8_t>> parked;  // via_bytes: the state of a preempted request
  std::map<RequestId, Index> resumed_unchecked;           // preemptions of grammar requests not yet sampled again
  std::map<RequestId, ik::FinishedRequest> done;
  Run run;
  for (int i = 0; i < n; ++i) {
    ik::RequestParams p;
    for (int k = 0; k < 6 + (i * 5) % 9; ++k) p.prompt.push_back(static_cast<TokenId>(300 + (i * 7 + k) % 40));
    p.max_new_tokens = 12 + (i * 3) % 10;
    p.eos_token_ids = {2};
    p.seed = seed + static_cast<std::uint64_t>(i);
    const RequestId id = sched.add_request(p);
    params.emplace(id, p);
    kind[id] = i % 3;
    chains.emplace(id, chain_of(s, i % 3));
    states.emplace(id, chains.at(id).make_state());
  }
  std::vector<float> logits;
  for (int it = 0; it < 2000 && !sched.idle(); ++it) {
    ik::BatchPlan<float>& plan = sched.schedule();
    for (const RequestId id : plan.preempted) {
      if (kind[id] != 2) ++run.grammar_preemptions, ++resumed_unchecked[id];
      if (via_bytes && states.count(id)) {  // (preempted again before it ran: parked already)
        parked[id] = states.at(id).to_bytes();
        states.erase(id);
      }
    }
    if (plan.empty()) continue;
    test::run_plan(
        pool, plan, [&](RequestId id) { return params.at(id).identity; }, s.vocab_size());  // writes the rows
    std::vector<TokenId> sampled;
    for (const auto& q : plan.sequences) {
      if (!q.sample) continue;
      REQUIRE(q.draft_tokens == 0);
      const RequestId id = q.id;
      if (via_bytes && !states.count(id)) {  // resumed: read back from bytes (replays its tokens)
        states.emplace(id, ik::SamplerState::from_bytes(parked.at(id)));
        parked.erase(id);
      }
      ik::SamplerState& st = states.at(id);
      if (const auto un = resumed_unchecked.find(id); un != resumed_unchecked.end()) {
        // the grammar state is where the generated tokens lead
        run.checked_resumes += un->second;
        resumed_unchecked.erase(un);
        const ik::GrammarConstraint& stage = std::get<ik::GrammarConstraint>(chains.at(id).processors()[0]);
        const auto* gs = st.rule_state<ik::GrammarConstraintState>();
        REQUIRE(gs != nullptr);
        const std::vector<TokenId> gen(q.context.begin() + static_cast<std::ptrdiff_t>(params.at(id).prompt.size()),
                                       q.context.end());
        CHECK(gs->tokens == gen);
        ik::GrammarMatcher fresh(s.masker);
        for (const TokenId t : gen) fresh.accept(t);
        ik::TokenBitset want, got;
        fresh.fill_mask(want);
        stage.matcher(*gs).fill_mask(got);
        CHECK(got == want);
      }
      const test::Row r = test::read_row(pool, *q.table, q.position + q.num_tokens - 1);
      logits_of(test::row_hash(r.k, r.v), q.draw_index, s, logits);
      const TokenId t = chains.at(id).sample(logits, q.context, st, ik::CounterRng(q.seed), q.draw_index);
      chains.at(id).accept(st, t);
      sampled.push_back(t);
    }
    for (const auto& f : sched.complete(sampled)) done.emplace(f.id, f);
  }
  REQUIRE(sched.idle());
  for (const auto& [id, p] : params) {
    INFO("request " << id << " kind " << kind[id] << (via_bytes ? " (state via bytes)" : ""));
    const Solo want = decode_alone(p, chains.at(id), s);
    REQUIRE(done.count(id));
    CHECK(done.at(id).output == want.output);
    CHECK(done.at(id).reason == want.reason);
    if (kind[id] != 2 && want.reason == ik::FinishReason::kEos) {
      std::string text;
      for (std::size_t k = 0; k + 1 < want.output.size(); ++k) text += s.trie->bytes(want.output[k]);
      INFO(text);
      CHECK(grammar_test::matches(*s.grammar, text));
      ++run.sentences;
    }
  }
  return run;
}

}  // namespace

TEST_CASE("scheduler: a grammar request preempted by recompute resumes with its grammar state",
          "[serving][preempt][grammar]") {
  const Setup s;
  for (const bool via_bytes : {false, true}) {
    Index preemptions = 0, checked = 0, sentences = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      const Run r = serve(s, 9, 10, via_bytes, seed);
      preemptions += r.grammar_preemptions;
      checked += r.checked_resumes;
      sentences += r.sentences;
    }
    INFO((via_bytes ? "via bytes" : "state kept"));
    INFO("grammar requests preempted: " << preemptions << ", ended with EOS: " << sentences);
    CHECK(preemptions >= 6);  // the pool is tight enough that grammar requests were preempted
    CHECK(checked == preemptions);
    CHECK(sentences >= 6);
  }
}
