#include "sampling/sampling_test_util.hpp"

#include "inferkit/sampling/categorical.hpp"
#include "inferkit/sampling/logits.hpp"
#include "inferkit/sampling/temperature.hpp"

using Catch::Contains;

TEST_CASE("scan_logits finds the max and the lowest argmax among ties", "[sampling][logits]") {
  for (std::size_t n : {1u, 2u, 15u, 16u, 17u, 1000u}) {
    auto x = test::random_logits(n, static_cast<unsigned>(n), 3.0f, true);
    const auto s = inferkit::scan_logits(x);
    const auto ref = inferkit::reference::ranked(x).front();
    CHECK(s.argmax == ref);
    CHECK(s.max == x[static_cast<std::size_t>(ref)]);
  }
  std::vector<float> tie{1, 5, 2, 5, 5};
  CHECK(inferkit::argmax_token(tie) == 1);
  std::vector<float> masked{-INFINITY, -INFINITY, -3.0f};
  CHECK(inferkit::argmax_token(masked) == 2);
  // Ties in different 1,024-token blocks, and the max alone in the last, partial block.
  std::vector<float> wide(5000, 0.0f);
  for (std::size_t i : {4999u, 3000u, 1500u, 1024u + 1023u}) wide[i] = 7.0f;
  CHECK(inferkit::argmax_token(wide) == 1500);
  wide.assign(5000, -1.0f);
  wide[4998] = 2.0f;
  CHECK(inferkit::argmax_token(wide) == 4998);
}

TEST_CASE("non-finite logits: NaN and +inf are errors, -inf is filtered", "[sampling][logits][errors]") {
  std::vector<float> x(40, 0.0f);
  x[33] = std::nanf("");
  CHECK_THROWS_WITH(inferkit::scan_logits(x), Contains("logits[33] = nan"));
  x[33] = INFINITY;
  CHECK_THROWS_WITH(inferkit::scan_logits(x), Contains("logits[33] = inf"));
  std::vector<float> all_masked(7, -INFINITY);
  CHECK_THROWS_WITH(inferkit::scan_logits(all_masked), Contains("all are -inf"));
  std::vector<float> empty;
  CHECK_THROWS_WITH(inferkit::scan_logits(empty), Contains("logits.size() = 0"));
}

TEST_CASE("temperature divides; zero is greedy with ties to the lowest id", "[sampling][temperature]") {
  auto x = test::random_logits(1000, 3);
  auto ref = x;
  inferkit::apply_temperature(x, 0.7f);
  inferkit::reference::temperature(ref, 0.7f);
  CHECK(test::same_bits(x, ref));

  std::vector<float> g{1.0f, 3.0f, -INFINITY, 3.0f, 2.0f};
  inferkit::apply_temperature(g, 0.0f);
  CHECK(g[1] == 3.0f);
  for (int i : {0, 2, 3, 4}) CHECK(g[i] == -INFINITY);

  CHECK_THROWS_WITH(inferkit::apply_temperature(x, -0.5f), Contains("temperature = -0.5"));
  CHECK_THROWS_WITH(inferkit::apply_temperature(x, std::nanf("")), Contains("temperature = nan"));
}

TEST_CASE("a temperature so small that max / T overflows keeps the softmax: the maxima share it",
          "[sampling][temperature]") {
  // Closed form as T -> 0+: the tied maxima (ids 1 and 3, and 61 and 97 in the long row) get
  // equal shares, everything else 0 (2.9999 is 1e-4 / T = -1e34 below: exp underflows to 0).
  for (std::size_t n : {std::size_t{5}, std::size_t{100}}) {
    std::vector<float> x(n, -2.0f);
    x[0] = 1.0f;
    x[1] = x[3] = 3.0f;
    x[2] = -INFINITY;
    x[4] = 2.9999f;
    if (n == 100) x[61] = x[97] = 3.0f;
    auto ref = x;
    inferkit::apply_temperature(x, 1e-38f);
    inferkit::reference::temperature(ref, 1e-38f);
    CHECK(test::same_bits(x, ref));
    const auto p = test::softmax(x);
    const double share = n == 100 ? 0.25 : 0.5;
    for (std::size_t i = 0; i < n; ++i) CHECK(p[i] == ((i == 1 || i == 3 || i == 61 || i == 97) ? share : 0.0));
  }
}
