#include "sampling/sampling_test_util.hpp"

#include "inferkit/sampling/allowed_tokens.hpp"
#include "inferkit/sampling/banned_tokens.hpp"
#include "inferkit/sampling/frequency_presence_penalty.hpp"
#include "inferkit/sampling/logit_bias.hpp"
#include "inferkit/sampling/no_repeat_ngram.hpp"
#include "inferkit/sampling/repetition_penalty.hpp"
#include "inferkit/sampling/typical.hpp"

using Catch::Contains;
using inferkit::TokenId;

TEST_CASE("repetition penalty: divide positive, multiply negative, once per distinct token", "[sampling][penalties]") {
  std::vector<float> x{2.0f, -2.0f, 0.0f, 4.0f, -INFINITY};
  const std::vector<TokenId> history{0, 1, 2, 0, 0, 4};
  inferkit::apply_repetition_penalty(x, history, 2.0f);
  CHECK(x[0] == 1.0f);  // once, though it occurs three times
  CHECK(x[1] == -4.0f);
  CHECK(x[2] == 0.0f);
  CHECK(x[3] == 4.0f);  // not in the history
  CHECK(x[4] == -INFINITY);
  CHECK_THROWS_WITH(inferkit::apply_repetition_penalty(x, history, 0.0f), Contains("repetition_penalty = 0"));
  const std::vector<TokenId> bad{1, 5};
  CHECK_THROWS_AS(inferkit::apply_repetition_penalty(x, bad, 1.1f), std::out_of_range);
  CHECK_THROWS_WITH(inferkit::apply_repetition_penalty(x, bad, 1.1f), Contains("history[1] = 5"));
}

TEST_CASE("frequency and presence penalties follow OpenAI's formula", "[sampling][penalties]") {
  std::vector<float> x{1.0f, 1.0f, 1.0f};
  const std::vector<TokenId> history{0, 0, 0, 2};
  inferkit::apply_frequency_presence_penalty(x, history, 0.5f, 0.25f);
  CHECK(x[0] == Approx(1.0f - 3 * 0.5f - 0.25f));
  CHECK(x[1] == 1.0f);
  CHECK(x[2] == Approx(1.0f - 0.5f - 0.25f));
}

TEST_CASE("no-repeat n-gram bans tokens that would repeat an n-gram", "[sampling][ngram]") {
  // History "a b c a b": with n = 3 the prefix "a b" occurred before, followed by c.
  const std::vector<TokenId> h{0, 1, 2, 0, 1};
  CHECK(inferkit::repeated_ngram_tokens(h, 3) == std::vector<TokenId>{2});
  CHECK(inferkit::repeated_ngram_tokens(h, 2) == std::vector<TokenId>{2});  // after "b" came "c"
  CHECK(inferkit::repeated_ngram_tokens(h, 1) == std::vector<TokenId>{0, 1, 2, 0, 1});
  CHECK(inferkit::repeated_ngram_tokens(h, 6).empty());
  std::vector<float> x(4, 0.0f);
  inferkit::apply_no_repeat_ngram(x, h, 3);
  CHECK(x[2] == -INFINITY);
  CHECK(x[3] == 0.0f);
  CHECK_THROWS_WITH(inferkit::apply_no_repeat_ngram(x, h, 0), Contains("no_repeat_ngram_size = 0"));
}

TEST_CASE("logit bias, banned and allowed tokens", "[sampling][masks]") {
  std::vector<float> x{0.0f, 1.0f, 2.0f, 3.0f};
  const std::vector<inferkit::TokenBias> bias{{0, 5.0f}, {3, -INFINITY}};
  inferkit::apply_logit_bias(x, bias);
  CHECK(x[0] == 5.0f);
  CHECK(x[3] == -INFINITY);
  const std::vector<TokenId> banned{1};
  inferkit::apply_banned_tokens(x, banned);
  CHECK(x[1] == -INFINITY);
  std::vector<float> y{0.0f, 1.0f, 2.0f, 3.0f};
  const std::vector<TokenId> allowed{3, 1, 3};
  inferkit::apply_allowed_tokens(y, allowed);
  CHECK(y == std::vector<float>{-INFINITY, 1.0f, -INFINITY, 3.0f});
  const std::vector<inferkit::TokenBias> nan_bias{{1, std::nanf("")}};
  CHECK_THROWS_WITH(inferkit::apply_logit_bias(x, nan_bias), Contains("logit_bias[0].bias = nan"));
  const std::vector<TokenId> out{9};
  CHECK_THROWS_WITH(inferkit::apply_banned_tokens(x, out), Contains("banned[0] = 9"));
}

TEST_CASE("typical sampling keeps the tokens closest to the entropy", "[sampling][typical]") {
  // Probabilities .4 .3 .2 .1: H = 1.2799 nats; |-log p - H| = .364, .076, .330, 1.023.
  std::vector<float> x{std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  auto y = x;
  inferkit::apply_typical(y, 0.35f);  // order 1, 2, 0, 3: 0.3 < .35, 0.3 + 0.2 >= .35 -> {1, 2}
  CHECK(y[1] == x[1]);
  CHECK(y[2] == x[2]);
  CHECK(y[0] == -INFINITY);
  CHECK(y[3] == -INFINITY);
  y = x;
  inferkit::apply_typical(y, 0.25f);  // token 1 alone reaches .25
  CHECK(y[2] == -INFINITY);
  CHECK(y[1] == x[1]);
  CHECK_THROWS_WITH(inferkit::apply_typical(y, 0.0f), Contains("typical_p = 0"));
}
