// Hugging Face's sequence-level rules: its published test vectors (tests/generation/
// test_logits_process.py), the references on random histories, and bad input.
#include "sampling/sampling_test_util.hpp"

#include <random>

#include "inferkit/sampling/bad_words.hpp"
#include "inferkit/sampling/begin_suppress_tokens.hpp"
#include "inferkit/sampling/exponential_decay_length_penalty.hpp"
#include "inferkit/sampling/min_new_tokens.hpp"
#include "inferkit/sampling/sequence_bias.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;

namespace {
std::vector<bool> banned(const std::vector<float>& x) {
  std::vector<bool> b;
  for (float v : x) b.push_back(v == -INFINITY);
  return b;
}
}  // namespace

TEST_CASE("bad words reproduce Hugging Face's test vectors", "[sampling][bad_words]") {
  // test_no_bad_words_dist_processor: vocab 5, EOS 4.
  const inferkit::BadWords q{{{1}, {4}, {1, 0}, {0, 1, 2}, {1, 3, 1, 3}}, {4}};
  std::vector<float> a(5, 0.2f), b(5, 0.2f);
  inferkit::apply_bad_words(a, std::vector<TokenId>{0, 1, 3, 1}, q);
  inferkit::apply_bad_words(b, std::vector<TokenId>{0, 1, 0, 1}, q);
  CHECK(banned(a) == std::vector<bool>{true, true, false, true, false});
  CHECK(banned(b) == std::vector<bool>{true, true, true, false, false});
  // [[4]] with EOS 4: nothing changes.
  std::vector<float> c(5, 0.2f);
  inferkit::apply_bad_words(c, std::vector<TokenId>{0, 1, 3, 1}, {{{4}}, {4}});
  CHECK(test::same_bits(c, std::vector<float>(5, 0.2f)));
}

TEST_CASE("sequence bias reproduces Hugging Face's test vector", "[sampling][sequence_bias]") {
  // test_bias_dist_processor: scores 0; the same termination biased twice ((1,3,1,3) and
  // (1,3,1,3,1,3), the longer one never fits the 4-token context).
  const inferkit::SequenceBias q{{{{1}, 100.0f},
                                  {{4}, 100.0f},
                                  {{1, 0}, -100.0f},
                                  {{0, 1, 2}, -100.0f},
                                  {{1, 3, 1, 3}, -100.0f},
                                  {{1, 3, 1, 3, 1, 3}, -100.0f}}};
  std::vector<float> a(5, 0.0f), b(5, 0.0f);
  inferkit::apply_sequence_bias(a, std::vector<TokenId>{0, 1, 3, 1}, q);
  inferkit::apply_sequence_bias(b, std::vector<TokenId>{0, 1, 0, 1}, q);
  CHECK(a == std::vector<float>{-100.0f, 100.0f, 0.0f, -100.0f, 100.0f});
  CHECK(b == std::vector<float>{-100.0f, 100.0f, -100.0f, 0.0f, 100.0f});
  // A sequence of n tokens needs n tokens of history (HF): (2, 0) does not apply to history [2].
  std::vector<float> c(5, 0.0f);
  inferkit::apply_sequence_bias(c, std::vector<TokenId>{2}, {{{{2, 0}, 5.0f}}});
  CHECK(c[0] == 0.0f);
  inferkit::apply_sequence_bias(c, std::vector<TokenId>{1, 2}, {{{{2, 0}, 5.0f}}});
  CHECK(c[0] == 5.0f);
}

TEST_CASE("min_new_tokens, exponential decay and begin-suppress follow Hugging Face", "[sampling][length_rules]") {
  // test_new_min_length_dist_processor: prompt 5, min_new_tokens 3, EOS [0, 18]: banned at
  // input lengths 5, 6, 7 (generated 0, 1, 2), not at 8 or 15.
  for (Index generated : {0, 1, 2, 3, 10}) {
    std::vector<float> x(20, 0.05f);
    inferkit::apply_min_new_tokens(x, {3, {0, 18}}, generated);
    CHECK((x[0] == -INFINITY) == (generated < 3));
    CHECK((x[18] == -INFINITY) == (generated < 3));
    CHECK(x[1] == 0.05f);
  }
  // test_exponential_decay_length_penalty: vocab 20, EOS 0, start 5, factor 1.1, prompt 2: no
  // change at input length 2, a raised EOS at length 20 (generated 18) for both signs, by
  // |l| (1.1^(18 - 5) - 1).
  const inferkit::ExponentialDecayLengthPenalty d{5, 1.1f, {0}};
  for (float l : {0.05f, -0.05f, -3.0f}) {
    std::vector<float> x(20, l);
    inferkit::apply_exponential_decay_length_penalty(x, d, 0);
    CHECK(x[0] == l);
    inferkit::apply_exponential_decay_length_penalty(x, d, 5);
    CHECK(x[0] == l);  // starts after start_index
    inferkit::apply_exponential_decay_length_penalty(x, d, 18);
    const double expect = double(l) + std::abs(double(l)) * (std::pow(double(1.1f), 13.0) - 1.0);
    CHECK(x[0] > l);
    CHECK(x[0] == Approx(expect).epsilon(1e-6));
    CHECK(x[1] == l);
  }
  // Huge growth saturates at the largest float; a banned EOS stays banned.
  std::vector<float> y(4, 1.0f);
  y[2] = -INFINITY;
  inferkit::apply_exponential_decay_length_penalty(y, {0, 1e30f, {0, 2}}, 1000);
  CHECK(y[0] == std::numeric_limits<float>::max());
  CHECK(y[2] == -INFINITY);
  // begin_suppress_tokens: only at the first generated position.
  std::vector<float> z(6, 0.0f);
  inferkit::apply_begin_suppress_tokens(z, {{1, 4}}, 1);
  CHECK(std::count(z.begin(), z.end(), -INFINITY) == 0);
  inferkit::apply_begin_suppress_tokens(z, {{1, 4}}, 0);
  CHECK(banned(z) == std::vector<bool>{false, true, false, false, true, false});
}

TEST_CASE("sequence rules equal the references on random histories", "[sampling][sequence_bias][bad_words]") {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 300; ++trial) {
    const TokenId vocab = 3 + static_cast<TokenId>(rng() % 40);
    std::vector<TokenId> history(rng() % 8);
    for (auto& t : history) t = static_cast<TokenId>(rng() % static_cast<unsigned>(vocab));
    inferkit::SequenceBias q;
    inferkit::BadWords w;
    for (int e = 0; e < 6; ++e) {
      std::vector<TokenId> s(1 + rng() % 4);
      for (auto& t : s) t = static_cast<TokenId>(rng() % static_cast<unsigned>(vocab));
      q.entries.push_back({s, float(int(rng() % 9) - 4) * 0.5f});
      if (e % 2) w.sequences.push_back(s);
    }
    w.eos_token_ids = {static_cast<TokenId>(rng() % static_cast<unsigned>(vocab))};
    auto x = test::random_logits(static_cast<std::size_t>(vocab), static_cast<unsigned>(trial), 2.0f, false, 0.2);
    auto r = x;
    inferkit::apply_sequence_bias(x, history, q);
    inferkit::apply_bad_words(x, history, w);
    inferkit::reference::sequence_bias(r, history, q);
    inferkit::reference::bad_words(r, history, w);
    REQUIRE(test::same_bits(x, r));
  }
}

TEST_CASE("sequence rules reject bad input", "[sampling][sequence_bias][length_rules][errors]") {
  std::vector<float> x(5, 0.0f);
  const std::vector<TokenId> h{1, 2};
  CHECK_THROWS_WITH(inferkit::apply_bad_words(x, h, {{{}}}), Contains("bad_words[0].size()"));
  CHECK_THROWS_WITH(inferkit::apply_bad_words(x, h, {{{1, -2}}}), Contains("bad_words[0][1] = -2"));
  CHECK_THROWS_AS(inferkit::apply_bad_words(x, h, {{{1, 7}}}), std::out_of_range);
  CHECK_THROWS_WITH(inferkit::apply_sequence_bias(x, h, {{{{1}, NAN}}}), Contains("sequence_bias[0].bias"));
  CHECK_THROWS_WITH(inferkit::apply_sequence_bias(x, h, {{{{1}, INFINITY}}}), Contains("sequence_bias[0].bias = inf"));
  CHECK_THROWS_AS(inferkit::apply_sequence_bias(x, h, {{{{5}, 1.0f}}}), std::out_of_range);
  CHECK_THROWS_WITH(inferkit::apply_min_new_tokens(x, {2, {}}, 0), Contains("eos_token_ids.size()"));
  CHECK_THROWS_WITH(inferkit::apply_min_new_tokens(x, {-1, {0}}, 0), Contains("min_new_tokens = -1"));
  CHECK_THROWS_AS(inferkit::apply_min_new_tokens(x, {2, {9}}, 0), std::out_of_range);
  CHECK_THROWS_WITH(inferkit::apply_min_new_tokens(x, {2, {0}}, -1), Contains("generated = -1"));
  CHECK_THROWS_WITH(inferkit::apply_exponential_decay_length_penalty(x, {0, 0.0f, {0}}, 3),
                    Contains("exponential_decay_factor = 0"));
  CHECK_THROWS_WITH(inferkit::apply_exponential_decay_length_penalty(x, {-2, 1.5f, {0}}, 3),
                    Contains("exponential_decay_start_index = -2"));
  CHECK_THROWS_AS(inferkit::apply_begin_suppress_tokens(x, {{5}}, 0), std::out_of_range);
}
