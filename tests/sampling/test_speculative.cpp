#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "inferkit/sampling/speculative.hpp"
#include "sampling_test_util.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;

namespace {

using test::chi2_critical;
using test::chi_square;
using test::Dist;
using test::draw;
using test::normalized;
using test::random_dist;

// Runs `trials` verifications of fixed (q_i, p_i) and checks every emitted position against p_i.
void check_exactness(const std::vector<Dist>& q, const std::vector<Dist>& p, long trials, std::uint64_t seed) {
  const Index k = static_cast<Index>(q.size()), v = static_cast<Index>(p[0].size());
  std::vector<float> qm, pm;
  for (const auto& d : q) qm.insert(qm.end(), d.begin(), d.end());
  for (const auto& d : p) pm.insert(pm.end(), d.begin(), d.end());
  const inferkit::MatrixView<const float> qv(qm.data(), k, v), pv(pm.data(), k + 1, v);
  std::vector<std::vector<long>> counts(static_cast<std::size_t>(k + 1),
                                        std::vector<long>(static_cast<std::size_t>(v)));
  std::vector<long> reached(static_cast<std::size_t>(k + 1), 0);
  const inferkit::CounterRng draft_rng(seed, 1), verify_rng(seed, 2);
  std::vector<TokenId> draft(static_cast<std::size_t>(k));
  long malformed = 0;
  for (long t = 0; t < trials; ++t) {
    for (Index i = 0; i < k; ++i)
      draft[i] = draw(q[i], draft_rng.uniform_double(static_cast<std::uint64_t>(t * k + i)));
    const auto r = inferkit::verify_draft(draft, qv, pv, verify_rng, static_cast<std::uint64_t>(t) * (k + 1));
    malformed += r.tokens.size() != static_cast<std::size_t>(r.accepted + 1);
    for (std::size_t j = 0; j < r.tokens.size(); ++j) {
      ++counts[j][static_cast<std::size_t>(r.tokens[j])];
      ++reached[j];
    }
  }
  CHECK(malformed == 0);
  for (Index j = 0; j <= k; ++j) {
    if (reached[j] < 2000) continue;  // too few samples at deep positions to test
    std::vector<double> pj(p[j].begin(), p[j].end());
    bool impossible = false;
    const double chi = chi_square(counts[j], pj, reached[j], impossible);
    int df = -1;
    for (double x : pj) df += x > 0;
    double tv = 0;
    for (Index i = 0; i < v; ++i) tv += std::abs(double(counts[j][i]) / double(reached[j]) - pj[i]);
    tv /= 2;
    INFO("position " << j << ": " << reached[j] << " samples, chi2 = " << chi << " (df " << df << "), TV = " << tv);
    CHECK_FALSE(impossible);
    CHECK(chi < chi2_critical(std::max(df, 1)));
    CHECK(tv < 2.0 * std::sqrt(double(v) / double(reached[j])));  // E[TV] <= sqrt(V / n) / 2
  }
}

}  // namespace

TEST_CASE("speculative acceptance emits tokens distributed exactly as p", "[sampling][speculative][statistics]") {
  std::mt19937 rng(2023);
  const long trials = 200000;
  for (std::size_t v : {5u, 20u}) {
    SECTION("random p and q, V = " + std::to_string(v)) {
      std::vector<Dist> q, p;
      for (int i = 0; i < 4; ++i) q.push_back(random_dist(v, rng));
      for (int i = 0; i < 5; ++i) p.push_back(random_dist(v, rng, 0.2));
      check_exactness(q, p, trials, 1);
    }
    SECTION("disjoint supports, V = " + std::to_string(v)) {
      std::vector<double> lo(v, 0.0), hi(v, 0.0);
      for (std::size_t i = 0; i < v; ++i) (i < v / 2 ? lo : hi)[i] = 1.0 + double(i);
      const Dist q = normalized(lo), p = normalized(hi);
      check_exactness({q, q, q}, {p, p, p, p}, trials, 2);  // every draft rejected
    }
    SECTION("identical p and q, V = " + std::to_string(v)) {
      std::vector<Dist> d;
      for (int i = 0; i < 4; ++i) d.push_back(random_dist(v, rng));
      check_exactness({d[0], d[1], d[2]}, d, trials, 3);
    }
    SECTION("one-hot draft against a spread target, V = " + std::to_string(v)) {
      std::vector<double> one(v, 0.0);
      one[1] = 1.0;
      const Dist q = normalized(one);
      std::vector<Dist> p;
      for (int i = 0; i < 3; ++i) p.push_back(random_dist(v, rng));
      check_exactness({q, q}, p, trials, 4);
    }
  }
}

TEST_CASE("two-step generation has the target's joint distribution (Markov target)",
          "[sampling][speculative][statistics]") {
  // Target and draft are Markov chains over 5 tokens; tokens are drafted from the draft chain,
  // verified against the target chain's rows, and generation continues until two tokens exist.
  const std::size_t v = 5;
  std::mt19937 rng(7);
  std::vector<Dist> P(v), Q(v);
  for (std::size_t s = 0; s < v; ++s) {
    P[s] = random_dist(v, rng, 0.1);
    Q[s] = random_dist(v, rng);
  }
  const TokenId start = 0;
  const Index k = 3;
  const inferkit::CounterRng drafts(5, 1), verify(5, 2);
  std::vector<long> joint(v * v, 0);
  const long trials = 200000;
  std::uint64_t draw_index = 0, draft_index = 0;
  for (long t = 0; t < trials; ++t) {
    std::vector<TokenId> out;
    TokenId ctx = start;
    while (out.size() < 2) {
      std::vector<TokenId> draft;
      std::vector<float> qm, pm;
      TokenId c = ctx;
      for (Index i = 0; i < k; ++i) {
        const TokenId x = draw(Q[c], drafts.uniform_double(draft_index++));
        draft.push_back(x);
        qm.insert(qm.end(), Q[c].begin(), Q[c].end());
        pm.insert(pm.end(), P[c].begin(), P[c].end());
        c = x;
      }
      pm.insert(pm.end(), P[c].begin(), P[c].end());
      const auto r =
          inferkit::verify_draft(draft, {qm.data(), k, Index(v)}, {pm.data(), k + 1, Index(v)}, verify, draw_index);
      draw_index += static_cast<std::uint64_t>(k + 1);
      for (TokenId x : r.tokens) out.push_back(x);
      ctx = out.back();
    }
    ++joint[static_cast<std::size_t>(out[0]) * v + static_cast<std::size_t>(out[1])];
  }
  std::vector<double> expect(v * v);
  for (std::size_t a = 0; a < v; ++a)
    for (std::size_t b = 0; b < v; ++b) expect[a * v + b] = double(P[start][a]) * double(P[a][b]);
  bool impossible = false;
  const double chi = chi_square(joint, expect, trials, impossible);
  int df = -1;
  for (double x : expect) df += x > 0;
  INFO("chi2 = " << chi << " with " << df << " degrees of freedom");
  CHECK_FALSE(impossible);
  CHECK(chi < chi2_critical(df));
}

TEST_CASE("deterministic verification cases", "[sampling][speculative]") {
  const Dist d{0.1f, 0.2f, 0.3f, 0.4f};
  std::vector<float> rows;
  for (int i = 0; i < 4; ++i) rows.insert(rows.end(), d.begin(), d.end());
  const std::vector<TokenId> draft{3, 0, 2};
  const inferkit::CounterRng rng(11);
  SECTION("p == q accepts everything and emits a bonus") {
    const auto r = inferkit::verify_draft(draft, {rows.data(), 3, 4}, {rows.data(), 4, 4}, rng, 0);
    CHECK(r.accepted == 3);
    CHECK(r.bonus);
    REQUIRE(r.tokens.size() == 4);
    CHECK(std::vector<TokenId>(r.tokens.begin(), r.tokens.begin() + 3) == draft);
  }
  SECTION("k = 0 draws from p_1") {
    const auto r = inferkit::verify_draft({}, {rows.data(), 0, 4}, {rows.data(), 1, 4}, rng, 0);
    CHECK(r.accepted == 0);
    CHECK(r.bonus);
    CHECK(r.tokens.size() == 1);
  }
  SECTION("p_i(x_i) = 0 always rejects; the correction comes from the residual") {
    std::vector<float> p = rows;
    p[4 * 1 + 0] = 0.0f;  // p_2 gives token 0 nothing
    p[4 * 1 + 1] = 0.3f;
    for (std::uint64_t s = 0; s < 50; ++s) {
      const auto r = inferkit::verify_draft(draft, {rows.data(), 3, 4}, {p.data(), 4, 4}, inferkit::CounterRng(s), 0);
      CHECK(r.accepted <= 1);
      if (r.accepted == 1) CHECK(r.tokens[1] == 1);  // residual max(0, p - q) is all on token 1
    }
  }
  SECTION("greedy verification stops at the first mismatch") {
    // Target rows as logits: argmaxes 3, 1, 2, 0.
    std::vector<float> t{0, 0, 0, 9, 0, 9, 0, 0, 0, 0, 9, 0, 9, 0, 0, 0};
    auto r = inferkit::verify_greedy(draft, {t.data(), 4, 4});
    CHECK(r.accepted == 1);
    CHECK(r.tokens == std::vector<TokenId>{3, 1});
    CHECK_FALSE(r.bonus);
    const std::vector<TokenId> all{3, 1, 2};
    r = inferkit::verify_greedy(all, {t.data(), 4, 4});
    CHECK(r.accepted == 3);
    CHECK(r.tokens == std::vector<TokenId>{3, 1, 2, 0});
    CHECK(r.bonus);
    const std::vector<TokenId> first_wrong{0};
    r = inferkit::verify_greedy(first_wrong, {t.data(), 2, 4});
    CHECK(r.accepted == 0);
    CHECK(r.tokens == std::vector<TokenId>{3});
  }
  SECTION("point-mass drafts: a certain token is accepted, an impossible one replaced") {
    std::vector<float> p{0, 0, 1, 0, 0.5f, 0.5f, 0, 0, 0.25f, 0.25f, 0.25f, 0.25f};
    const std::vector<TokenId> pm{2, 3};
    const auto r = inferkit::verify_point_mass_draft(pm, {p.data(), 3, 4}, rng, 0);
    CHECK(r.accepted == 1);  // p_1(2) = 1, p_2(3) = 0
    REQUIRE(r.tokens.size() == 2);
    CHECK(r.tokens[0] == 2);
    CHECK((r.tokens[1] == 0 || r.tokens[1] == 1));
  }
  SECTION("same seed, same result") {
    std::vector<float> p = rows;
    std::reverse(p.begin(), p.end());
    const auto a = inferkit::verify_draft(draft, {rows.data(), 3, 4}, {p.data(), 4, 4}, inferkit::CounterRng(5, 9), 40);
    const auto b = inferkit::verify_draft(draft, {rows.data(), 3, 4}, {p.data(), 4, 4}, inferkit::CounterRng(5, 9), 40);
    CHECK(a.tokens == b.tokens);
  }
}

TEST_CASE("speculative verification rejects malformed input", "[sampling][speculative][errors]") {
  const Dist d{0.25f, 0.25f, 0.5f, 0.0f};
  std::vector<float> rows;
  for (int i = 0; i < 3; ++i) rows.insert(rows.end(), d.begin(), d.end());
  const inferkit::CounterRng rng(1);
  const std::vector<TokenId> draft{3, 0};
  CHECK_THROWS_WITH(inferkit::verify_draft(draft, {rows.data(), 2, 4}, {rows.data(), 3, 4}, rng, 0),
                    Contains("q[0][3] = 0"));
  const std::vector<TokenId> out{9};
  CHECK_THROWS_AS(inferkit::verify_draft(out, {rows.data(), 1, 4}, {rows.data(), 2, 4}, rng, 0), std::out_of_range);
  const std::vector<TokenId> ok{2};
  CHECK_THROWS_WITH(inferkit::verify_draft(ok, {rows.data(), 1, 4}, {rows.data(), 1, 4}, rng, 0),
                    Contains("p.rows() = 1"));
  CHECK_THROWS_WITH(inferkit::verify_draft(ok, {rows.data(), 1, 3}, {rows.data(), 2, 4}, rng, 0),
                    Contains("q.cols() = 3"));
  std::vector<float> bad = rows;
  bad[4 + 1] = 0.9f;  // row 1 sums to 1.65
  inferkit::VerifyOptions all;
  all.check_all_rows = true;
  CHECK_THROWS_WITH(inferkit::verify_draft(ok, {rows.data(), 1, 4}, {bad.data(), 2, 4}, rng, 0, all),
                    Contains("p[1] sum"));
  bad[4 + 1] = std::nanf("");
  CHECK_THROWS_WITH(inferkit::verify_draft(ok, {rows.data(), 1, 4}, {bad.data(), 2, 4}, rng, 0, all),
                    Contains("p[1][1] = nan"));
  // A tolerance >= 1 admits a row of zeros: it has nothing to draw (regression from
  // tests/fuzz/fuzz_speculative, which drew the last token with probability 0).
  const std::vector<float> zeros(4, 0.0f);
  inferkit::VerifyOptions loose;
  loose.tolerance = 2.0;
  CHECK_THROWS_WITH(inferkit::verify_draft({}, {}, {zeros.data(), 1, 4}, rng, 0, loose),
                    Contains("needs positive mass"));
  CHECK_THROWS_WITH(inferkit::verify_point_mass_draft(ok, {zeros.data(), 2, 4}, rng, 0, loose),
                    Contains("needs positive mass"));
}

TEST_CASE("choosing k: expected tokens per pass, speedup, online acceptance estimate", "[sampling][speculative]") {
  CHECK(inferkit::expected_tokens_per_pass(0.0, 4) == 1.0);
  CHECK(inferkit::expected_tokens_per_pass(1.0, 4) == 5.0);
  CHECK(inferkit::expected_tokens_per_pass(0.8, 4) == Approx((1 - std::pow(0.8, 5)) / 0.2));
  CHECK(inferkit::expected_speedup(0.8, 4, 0.05) == Approx((1 - std::pow(0.8, 5)) / 0.2 / 1.2));
  // With free drafts a higher k always helps; with costly drafts and poor acceptance, k = 0.
  CHECK(inferkit::best_draft_length(0.9, 0.0, 8) == 8);
  CHECK(inferkit::best_draft_length(0.1, 1.0, 8) == 0);
  inferkit::AcceptanceRateEstimator est;
  CHECK(est.rate() == 0.5);
  // Simulate i.i.d. acceptances with a = 0.7 and k = 4.
  std::mt19937 rng(3);
  std::bernoulli_distribution acc(0.7);
  for (int t = 0; t < 20000; ++t) {
    Index a = 0;
    while (a < 4 && acc(rng)) ++a;
    est.observe(a, 4);
  }
  CHECK(est.rate() == Approx(0.7).margin(0.01));
  CHECK_THROWS_WITH(est.observe(5, 4), Contains("accepted = 5"));
  CHECK_THROWS_WITH(inferkit::expected_tokens_per_pass(1.5, 2), Contains("acceptance_rate = 1.5"));
}

TEST_CASE("batched verification equals verifying each sequence alone, on any thread count", "[sampling][speculative]") {
  std::mt19937 rng(77);
  const std::size_t v = 12;
  std::vector<std::vector<float>> qs, ps;
  std::vector<std::vector<TokenId>> drafts;
  std::vector<inferkit::DraftToVerify> items;
  for (int s = 0; s < 9; ++s) {
    const Index k = s % 4;  // k = 0 .. 3, and s % 3 == 2 uses point-mass drafts
    std::vector<float> q, p;
    std::vector<TokenId> d;
    for (Index i = 0; i < k; ++i) {
      const Dist qi = random_dist(v, rng);
      q.insert(q.end(), qi.begin(), qi.end());
      d.push_back(draw(qi, 0.37 + 0.05 * double(i)));
    }
    for (Index i = 0; i <= k; ++i) {
      const Dist pi = random_dist(v, rng);
      p.insert(p.end(), pi.begin(), pi.end());
    }
    qs.push_back(q);
    ps.push_back(p);
    drafts.push_back(d);
  }
  for (std::size_t s = 0; s < drafts.size(); ++s) {
    const Index k = static_cast<Index>(drafts[s].size());
    const bool point_mass = s % 3 == 2 && k > 0;
    items.push_back({drafts[s],
                     point_mass ? inferkit::MatrixView<const float>()
                                : inferkit::MatrixView<const float>(qs[s].data(), k, Index(v)),
                     {ps[s].data(), k + 1, Index(v)},
                     inferkit::CounterRng(3, s),
                     10 * s});
  }
  const auto one = inferkit::verify_batch(items, {}, 1), two = inferkit::verify_batch(items, {}, 2);
  for (std::size_t s = 0; s < items.size(); ++s) {
    const auto& it = items[s];
    const auto alone = (it.q.rows() == 0 && !it.draft.empty())
                           ? inferkit::verify_point_mass_draft(it.draft, it.p, it.rng, it.first_draw)
                           : inferkit::verify_draft(it.draft, it.q, it.p, it.rng, it.first_draw);
    CHECK(one[s].tokens == alone.tokens);
    CHECK(two[s].tokens == alone.tokens);
    CHECK(one[s].accepted == alone.accepted);
  }
  for (int bad : {-1, inferkit::kMaxThreads + 1})
    CHECK_THROWS_WITH(inferkit::verify_batch(items, {}, bad), Catch::Contains("num_threads = " + std::to_string(bad)));
}
