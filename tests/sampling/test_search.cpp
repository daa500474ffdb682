#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "inferkit/sampling/beam_search.hpp"
#include "inferkit/sampling/contrastive_decoding.hpp"
#include "inferkit/sampling/contrastive_search.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;

namespace {

// A toy "model": next-token log-probabilities depend on the last token (row 0 = the prompt).
struct Toy {
  Index vocab;
  std::vector<std::vector<float>> logp;  // [prev token + 1][vocab]
  const std::vector<float>& next(const std::vector<TokenId>& seq) const {
    return logp[seq.empty() ? 0 : static_cast<std::size_t>(seq.back() + 1)];
  }
};

Toy random_toy(Index vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::gamma_distribution<double> g(0.6, 1.0);
  Toy t{vocab, {}};
  for (Index r = 0; r <= vocab; ++r) {
    std::vector<double> w(static_cast<std::size_t>(vocab));
    double s = 0;
    for (auto& x : w) s += (x = g(rng) + 1e-3);
    std::vector<float> lp;
    for (double x : w) lp.push_back(static_cast<float>(std::log(x / s)));
    t.logp.push_back(lp);
  }
  return t;
}

struct Outcome {
  std::vector<inferkit::BeamHypothesis> best;
  Index steps;
};

Outcome run_beam(const Toy& toy, inferkit::BeamSearchOptions opt) {
  inferkit::BeamSearch bs(opt);
  while (!bs.done()) {
    std::vector<float> rows;
    for (Index b = 0; b < bs.num_live(); ++b) {
      const auto& r = toy.next(bs.live_tokens(b));
      rows.insert(rows.end(), r.begin(), r.end());
    }
    bs.step({rows.data(), bs.num_live(), toy.vocab});
  }
  return {bs.finished(), bs.steps()};
}

// Exhaustive optimum: every sequence that ends in EOS (token 0) or reaches the length limit.
double exhaustive_best(const Toy& toy, Index max_new, inferkit::LengthPenalty mode, double alpha) {
  double best = -INFINITY;
  std::function<void(std::vector<TokenId>&, double)> go = [&](std::vector<TokenId>& seq, double sum) {
    const auto& lp = toy.next(seq);
    for (TokenId t = 0; t < toy.vocab; ++t) {
      const double s = sum + lp[static_cast<std::size_t>(t)];
      seq.push_back(t);
      if (t == 0 || static_cast<Index>(seq.size()) == max_new)
        best = std::max(best, inferkit::beam_score(s, static_cast<Index>(seq.size()), mode, alpha));
      else
        go(seq, s);
      seq.pop_back();
    }
  };
  std::vector<TokenId> seq;
  go(seq, 0.0);
  return best;
}

}  // namespace

TEST_CASE("beam search with enough beams finds the exhaustive optimum", "[sampling][beam]") {
  for (unsigned seed : {1u, 2u, 3u})
    for (auto [mode, alpha] :
         {std::pair{inferkit::LengthPenalty::kNone, 1.0}, std::pair{inferkit::LengthPenalty::kHuggingFace, 1.0},
          std::pair{inferkit::LengthPenalty::kHuggingFace, 2.0}, std::pair{inferkit::LengthPenalty::kGnmt, 0.6}}) {
      const Toy toy = random_toy(4, seed);
      inferkit::BeamSearchOptions opt;
      opt.num_beams = 200;  // more than 3^4 live sequences
      opt.max_new_tokens = 5;
      opt.eos_token_ids = {0};
      opt.length_penalty_mode = mode;
      opt.length_penalty = alpha;
      opt.early_stopping = inferkit::EarlyStopping::kNever;
      const auto out = run_beam(toy, opt);
      INFO("seed " << seed << ", mode " << int(mode) << ", alpha " << alpha);
      REQUIRE_FALSE(out.best.empty());
      CHECK(out.best.front().score == Approx(exhaustive_best(toy, 5, mode, alpha)).epsilon(1e-9));
      for (std::size_t i = 1; i < out.best.size(); ++i) CHECK(out.best[i - 1].score >= out.best[i].score);
    }
}

TEST_CASE("length penalty changes the winner: hand-computed scores", "[sampling][beam]") {
  // Tokens: 0 = EOS, 1 = a, 2 = b (never likely). From the prompt: EOS .45, a .55.
  // After a: EOS .6, a .4. Hypotheses: [EOS] ln .45; [a, EOS] ln .33; [a, a] ln .22 (length limit 2).
  const float ninf = -INFINITY;
  Toy toy{3,
          {{std::log(0.45f), std::log(0.55f), ninf},
           {std::log(0.6f), std::log(0.4f), ninf},
           {std::log(0.6f), std::log(0.4f), ninf},
           {std::log(0.6f), std::log(0.4f), ninf}}};
  inferkit::BeamSearchOptions opt;
  opt.num_beams = 2;
  opt.max_new_tokens = 2;
  opt.eos_token_ids = {0};
  opt.early_stopping = inferkit::EarlyStopping::kNever;
  const double s_eos = std::log(0.45), s_aeos = std::log(0.55) + std::log(0.6);
  struct Expect {
    inferkit::LengthPenalty mode;
    double alpha;
    std::vector<TokenId> winner;
    double score;
  };
  for (const Expect& e : {Expect{inferkit::LengthPenalty::kNone, 1.0, {0}, s_eos},                 // -0.799 > -1.109
                          Expect{inferkit::LengthPenalty::kHuggingFace, 1.0, {1, 0}, s_aeos / 2},  // -0.554 > -0.799
                          Expect{inferkit::LengthPenalty::kGnmt, 1.0, {0}, s_eos},                 // -0.799 > -0.950
                          Expect{inferkit::LengthPenalty::kGnmt, 3.0, {1, 0}, s_aeos / std::pow(7.0 / 6.0, 3.0)}}) {
    opt.length_penalty_mode = e.mode;
    opt.length_penalty = e.alpha;
    const auto out = run_beam(toy, opt);
    INFO("mode " << int(e.mode) << ", alpha " << e.alpha);
    CHECK(out.best.front().tokens == e.winner);
    CHECK(out.best.front().score == Approx(e.score).epsilon(1e-6));
  }
}

TEST_CASE("early stopping modes: true stops first, never last, and search only improves", "[sampling][beam]") {
  bool found = false;
  for (unsigned seed = 1; seed < 500 && !found; ++seed) {
    const Toy toy = random_toy(5, seed);
    inferkit::BeamSearchOptions opt;
    opt.num_beams = 2;
    opt.max_new_tokens = 8;
    opt.eos_token_ids = {0};
    opt.length_penalty = 1.0;
    opt.early_stopping = inferkit::EarlyStopping::kTrue;
    const auto a = run_beam(toy, opt);
    opt.early_stopping = inferkit::EarlyStopping::kHeuristic;
    const auto b = run_beam(toy, opt);
    opt.early_stopping = inferkit::EarlyStopping::kNever;
    const auto c = run_beam(toy, opt);
    REQUIRE(a.steps <= b.steps);
    REQUIRE(b.steps <= c.steps);
    // The beams follow the same path whatever the rule, so stopping later can only keep better ones.
    REQUIRE(a.best.front().score <= b.best.front().score);
    REQUIRE(b.best.front().score <= c.best.front().score);
    found = a.steps < b.steps && b.steps < c.steps;
  }
  CHECK(found);
}

TEST_CASE("beam search honours min_new_tokens and rejects bad input", "[sampling][beam]") {
  const Toy toy = random_toy(3, 9);
  inferkit::BeamSearchOptions opt;
  opt.num_beams = 3;
  opt.max_new_tokens = 6;
  opt.min_new_tokens = 3;
  opt.eos_token_ids = {0};
  const auto out = run_beam(toy, opt);
  for (const auto& h : out.best) CHECK(h.tokens.size() >= 3);
  CHECK_THROWS_WITH(inferkit::BeamSearch({.num_beams = 0}), Contains("num_beams = 0"));
  inferkit::BeamSearch bs(opt);
  std::vector<float> two_rows(6, -1.0f);
  CHECK_THROWS_WITH(bs.step({two_rows.data(), 2, 3}), Contains("logprobs.rows() = 2"));
}

TEST_CASE("contrastive search: alpha 0 is greedy; the degeneration penalty can change the choice",
          "[sampling][contrastive]") {
  const std::vector<float> logits{2.0f, 1.9f, 0.5f, -1.0f};
  const auto c = inferkit::contrastive_candidates(logits, 3);
  REQUIRE(c.tokens == std::vector<TokenId>{0, 1, 2});
  inferkit::ContextStates ctx(2);
  const std::vector<float> h1{1.0f, 0.0f}, h2{0.0f, 1.0f};
  ctx.append(h1);
  // Candidate 0 repeats the context direction (cos 1); candidate 1 is orthogonal (cos 0).
  const std::vector<float> cand{3.0f, 0.0f, 0.0f, 2.0f, 1.0f, 1.0f};
  CHECK(inferkit::contrastive_select(c, {cand.data(), 3, 2}, ctx, 0.0f) == 0);
  std::vector<float> scores(3);
  const Index pick = inferkit::contrastive_select(c, {cand.data(), 3, 2}, ctx, 0.5f, scores);
  // Hand computation: p = softmax(2, 1.9, .5, -1); score = .5 p - .5 max cos.
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  CHECK(scores[0] == Approx(0.5 * std::exp(2.0) / z - 0.5));
  CHECK(scores[1] == Approx(0.5 * std::exp(1.9) / z));
  CHECK(scores[2] == Approx(0.5 * std::exp(0.5) / z - 0.5 * std::sqrt(0.5)));
  CHECK(pick == 1);
  ctx.append(h2);
  CHECK(ctx.size() == 2);
  const std::vector<float> zero{0.0f, 0.0f};
  CHECK_THROWS_WITH(ctx.append(zero), Contains("norm"));
  const std::vector<float> zero_cand{0.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f};
  CHECK_THROWS_WITH(inferkit::contrastive_select(c, {zero_cand.data(), 3, 2}, ctx, 0.5f),
                    Contains("candidate hidden state norm"));
}

TEST_CASE("contrastive decoding: plausibility cut and expert-minus-amateur scores", "[sampling][contrastive]") {
  // Expert probabilities .5 .3 .15 .05; with alpha .2 the cut is .1: token 3 is implausible.
  const std::vector<float> expert{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const std::vector<float> amateur{std::log(0.7f), std::log(0.1f), std::log(0.1f), std::log(0.1f)};
  const auto s = inferkit::contrastive_decoding_scores(expert, amateur, 0.2f);
  CHECK(s[0] == Approx(std::log(0.5 / 0.7)).margin(1e-5));
  CHECK(s[1] == Approx(std::log(0.3 / 0.1)).margin(1e-5));
  CHECK(s[2] == Approx(std::log(0.15 / 0.1)).margin(1e-5));
  CHECK(s[3] == -INFINITY);
  CHECK(inferkit::contrastive_decode(expert, amateur, {.alpha = 0.2f}) == 1);
  // An amateur equal to the expert scores every plausible token 0.
  const auto same = inferkit::contrastive_decoding_scores(expert, expert, 0.2f);
  for (int v = 0; v < 3; ++v) CHECK(same[v] == Approx(0.0).margin(1e-6));
  CHECK(same[3] == -INFINITY);
  // Sampling from softmax(score / T) never picks an implausible token.
  for (std::uint64_t i = 0; i < 200; ++i)
    CHECK(inferkit::contrastive_decode(expert, amateur, {.alpha = 0.2f, .temperature = 1.0f}, inferkit::CounterRng(4),
                                       i) != 3);
  CHECK_THROWS_WITH(inferkit::contrastive_decoding_scores(expert, amateur, 0.0f), Contains("alpha = 0"));
}
