#include "sampling/sampling_test_util.hpp"

#include "inferkit/sampling/min_p.hpp"
#include "inferkit/sampling/top_k.hpp"
#include "inferkit/sampling/top_p.hpp"

#include <algorithm>
#include <random>

using Catch::Contains;

namespace {
const std::size_t kVocabs[] = {1, 2, 37, 32000, 128256, 262144};
}

TEST_CASE("top-k equals the sort-based definition", "[sampling][top_k]") {
  unsigned seed = 1;
  for (std::size_t n : kVocabs)
    for (bool ties : {false, true})
      for (double masked : {0.0, 0.3})
        for (inferkit::Index k : {0L, 1L, 2L, 40L, 1000L, static_cast<long>(n) - 1, static_cast<long>(n)}) {
          INFO("V = " << n << ", ties = " << ties << ", masked = " << masked << ", k = " << k);
          auto x = test::random_logits(n, seed++, 3.0f, ties, masked);
          auto ref = x;
          inferkit::apply_top_k(x, k);
          inferkit::reference::top_k(ref, k);
          CHECK(test::same_bits(x, ref));
        }
}

TEST_CASE("top-p equals the sort-based definition on dense and candidate-list paths", "[sampling][top_p]") {
  unsigned seed = 100;
  for (std::size_t n : kVocabs)
    for (float sigma : {1.0f, 3.0f, 6.0f})
      for (float p : {0.1f, 0.5f, 0.9f, 0.95f, 0.999f}) {
        INFO("V = " << n << ", sigma = " << sigma << ", p = " << p);
        auto x = test::random_logits(n, seed++, sigma, sigma == 3.0f, sigma == 6.0f ? 0.2 : 0.0);
        auto ref = x;
        inferkit::apply_top_p(x, p);
        inferkit::reference::top_p(ref, p);
        CHECK(test::same_bits(x, ref));
        // After top-k the set is a short list: the list path.
        auto y = test::random_logits(n, seed++, sigma, true);
        auto yref = y;
        inferkit::Candidates c(y);
        inferkit::apply_top_k(c, 50);
        inferkit::apply_top_p(c, p, 3);
        c.materialize();
        inferkit::reference::top_k(yref, 50);
        inferkit::reference::top_p(yref, p, 3);
        CHECK(test::same_bits(y, yref));
      }
}

TEST_CASE("top-p is inclusive exactly at the threshold and honours min_keep", "[sampling][top_p]") {
  // Weights 1, 1/2, 1/4, 1/4 (logits 0, -ln 2, -2 ln 2 ...) sum to 2: probabilities .5 .25 .125 .125.
  const float l2 = std::log(2.0f);
  std::vector<float> base{-2 * l2, 0.0f, -l2, -2 * l2};
  // The weights must be exact powers of two for the boundary to be exact.
  REQUIRE(inferkit::exp_weight(-l2, 0.0f) == 0.5f);
  REQUIRE(inferkit::exp_weight(-2 * l2, 0.0f) == 0.25f);
  auto x = base;
  inferkit::apply_top_p(x, 0.75f);  // .5 + .25 reaches .75 exactly: keep two
  CHECK(x[1] == 0.0f);
  CHECK(x[2] == -l2);
  CHECK(x[0] == -INFINITY);
  CHECK(x[3] == -INFINITY);
  x = base;
  inferkit::apply_top_p(x, 0.5f);  // the top token alone reaches .5
  CHECK(x[2] == -INFINITY);
  x = base;
  inferkit::apply_top_p(x, 0.8f);  // needs a third token: tie between ids 0 and 3 goes to 0
  CHECK(x[0] == -2 * l2);
  CHECK(x[3] == -INFINITY);
  x = base;
  inferkit::apply_top_p(x, 0.1f, 3);  // min_keep
  CHECK(x[0] == -2 * l2);
  CHECK(x[3] == -INFINITY);
  CHECK(x[1] == 0.0f);
  CHECK_THROWS_WITH(inferkit::apply_top_p(x, -0.1f), Contains("top_p = -0.1"));  // 0 is accepted (issue 20)
  CHECK_THROWS_WITH(inferkit::apply_top_p(x, 1.5f), Contains("top_p = 1.5"));
  CHECK_THROWS_WITH(inferkit::apply_top_p(x, 0.5f, 0), Contains("min_keep = 0"));
}

TEST_CASE("min-p equals the sort-based definition and is inclusive", "[sampling][min_p]") {
  unsigned seed = 300;
  for (std::size_t n : kVocabs)
    for (float mp : {0.0f, 0.01f, 0.05f, 0.2f, 1.0f}) {
      INFO("V = " << n << ", min_p = " << mp);
      auto x = test::random_logits(n, seed++, 3.0f, true, 0.1);
      auto ref = x;
      inferkit::apply_min_p(x, mp, 2);
      inferkit::reference::min_p(ref, mp, 2);
      CHECK(test::same_bits(x, ref));
    }
  // A token whose weight equals min_p exactly is kept.
  std::vector<float> x{0.0f, -1.0f, -1.0f, -3.0f};
  const float w = inferkit::exp_weight(-1.0f, 0.0f);
  inferkit::apply_min_p(x, w);
  CHECK(x[1] == -1.0f);
  CHECK(x[2] == -1.0f);
  CHECK(x[3] == -INFINITY);
  CHECK_THROWS_WITH(inferkit::apply_min_p(x, 1.2f), Contains("min_p = 1.2"));
}

TEST_CASE("top-p with most tokens filtered and p close to 1 keeps only finite tokens", "[sampling][top_p]") {
  for (std::size_t n : {100u, 5000u, 70000u}) {
    auto x = test::random_logits(n, 77, 2.0f, false, 0.9);
    auto ref = x;
    inferkit::Candidates c(x);
    inferkit::apply_top_p(c, 0.999999f);
    bool finite_only = true;
    c.for_each([&](inferkit::TokenId id) { finite_only = finite_only && x[static_cast<std::size_t>(id)] > -INFINITY; });
    CHECK(finite_only);
    c.materialize();
    inferkit::reference::top_p(ref, 0.999999f);
    CHECK(test::same_bits(x, ref));
  }
}

TEST_CASE("the descending radix sort of pivot samples equals std::sort", "[sampling][top_p]") {
  for (unsigned seed = 0; seed < 20; ++seed) {
    auto x = test::random_logits(1 + seed * 97, seed, seed % 2 ? 3.0f : 0.01f, seed % 3 == 0);
    x.push_back(0.0f);
    x.push_back(-0.0f);
    x.push_back(std::numeric_limits<float>::lowest());
    x.push_back(std::numeric_limits<float>::max());
    auto ref = x;
    inferkit::detail::sort_descending(x);
    // The reference orders +0 before -0 like the radix keys do.
    std::sort(ref.begin(), ref.end(),
              [](float a, float b) { return a > b || (a == b && !std::signbit(a) && std::signbit(b)); });
    CHECK(test::same_bits(x, ref));
  }
}

TEST_CASE("top-p on clustered and heavily tied logits equals the sort-based definition", "[sampling][top_p]") {
  // Logits on a coarse grid (huge tie blocks), in a narrow cluster with outliers, all equal, and
  // two values only: the interval rounds must end on ties and never lose the boundary.
  std::mt19937 rng(5);
  for (int shape = 0; shape < 4; ++shape)
    for (float p : {0.3f, 0.9f, 0.95f, 0.999f}) {
      std::vector<float> x(131072);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float u = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        switch (shape) {
          case 0:
            x[i] = std::floor(u * 8.0f) * 0.5f;
            break;
          case 1:
            x[i] = i % 1000 == 0 ? 5.0f * u : 1.0f + u * 1e-5f;
            break;
          case 2:
            x[i] = 0.25f;
            break;
          default:
            x[i] = u < 0.5f ? 1.0f : -1.0f;
            break;
        }
      }
      INFO("shape = " << shape << ", p = " << p);
      auto ref = x;
      inferkit::apply_top_p(x, p);
      inferkit::reference::top_p(ref, p);
      CHECK(test::same_bits(x, ref));
    }
}

TEST_CASE("min-p that keeps most of a dense row filters it in place, exactly", "[sampling][min_p]") {
  unsigned seed = 900;
  for (std::size_t n : {32000u, 128256u})
    for (float mp : {0.001f, 0.05f, 0.3f}) {
      INFO("V = " << n << ", min_p = " << mp);
      auto x = test::random_logits(n, seed++, 1.0f, true, 0.05);
      // Tokens sitting exactly on the threshold band: their weight decides, not the margin.
      const float max = *std::max_element(x.begin(), x.end());
      for (std::size_t i = 0; i < 64; ++i) x[i * 97] = max + std::log(mp) + (static_cast<float>(i) - 32.0f) * 1e-6f;
      auto ref = x;
      inferkit::Candidates c(x);
      inferkit::apply_min_p(c, mp);
      if (mp == 0.001f) CHECK(c.dense());  // most survive: filtered in place, no candidate list
      c.materialize();
      inferkit::reference::min_p(ref, mp);
      CHECK(test::same_bits(x, ref));
    }
}

#if defined(INFERKIT_SIMD_XSIMD) && defined(__AVX2__) && !defined(__AVX512F__)
TEST_CASE("the AVX2 left-pack table moves the set lanes of every 8-bit mask to the front, in order",
          "[sampling][top_p]") {
  for (unsigned m = 0; m < 256; ++m) {
    alignas(32) std::int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_permutevar8x32_epi32(_mm256_setr_epi32(10, 11, 12, 13, 14, 15, 16, 17),
                                                   inferkit::detail::left_pack_indices(m)));
    std::vector<std::int32_t> expect;  // the definition: set bits in ascending lane order
    for (int lane = 0; lane < 8; ++lane)
      if (m >> lane & 1u) expect.push_back(10 + lane);
    INFO("mask = " << m);
    CHECK(std::vector<std::int32_t>(lanes, lanes + expect.size()) == expect);
  }
}
#endif
