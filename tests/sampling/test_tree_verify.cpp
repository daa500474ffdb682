#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "inferkit/sampling/speculative.hpp"
#include "inferkit/sampling/token_tree.hpp"
#include "inferkit/sampling/tree_verify.hpp"
#include "sampling_test_util.hpp"

using Catch::Contains;
using inferkit::Index;
using inferkit::TokenId;
using inferkit::TokenTree;

namespace {

// Chain verification outcomes over seeded random cases, folded into one FNV-1a hash. The
// expected values were printed by sampling/speculative.hpp before the chain ran through the tree
// code (commit 6772f87, its own loop per position), at -O2 -march=native and at -O0 (V <= 41
// and, with `large`, V = 1000 .. 4999, several 1024-token blocks per row).
std::uint64_t chain_outcome_hash(int which, bool large = false) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  std::mt19937 gen(424242u + unsigned(which) + (large ? 1000u : 0u));
  for (int c = 0; c < (large ? 300 : 3000); ++c) {
    const Index v = large ? 1000 + Index(gen() % 4000) : 2 + Index(gen() % 40), k = Index(gen() % 7);
    std::vector<float> q(std::size_t(k * v)), p(std::size_t((k + 1) * v));
    std::gamma_distribution<double> g(0.5, 1.0);
    auto fill = [&](float* row, bool sparse) {
      double s = 0;
      std::vector<double> w(static_cast<std::size_t>(v));
      for (auto& x : w) x = (sparse && gen() % 3 == 0) ? 0.0 : g(gen);
      w[gen() % std::size_t(v)] += 0.3;
      for (double x : w) s += x;
      for (Index i = 0; i < v; ++i) row[i] = float(w[std::size_t(i)] / s);
    };
    for (Index i = 0; i < k; ++i) fill(q.data() + i * v, false);
    for (Index i = 0; i <= k; ++i) fill(p.data() + i * v, true);
    std::vector<TokenId> draft;
    for (Index i = 0; i < k; ++i) {
      TokenId t = TokenId(gen() % std::size_t(v));
      if (gen() % 2 == 0) t = inferkit::argmax_token(std::span<const float>(p.data() + i * v, std::size_t(v)));
      draft.push_back(t);
    }
    const std::uint64_t stream = gen() % 5;  // drawn before the seed, as the test's values were made
    const std::uint64_t seed = gen();
    const inferkit::CounterRng rng(seed, stream);
    const std::uint64_t first = gen() % 1000;
    inferkit::VerifyResult r;
    if (which == 0) r = inferkit::verify_draft(draft, {q.data(), k, v}, {p.data(), k + 1, v}, rng, first);
    if (which == 1) r = inferkit::verify_point_mass_draft(draft, {p.data(), k + 1, v}, rng, first);
    if (which == 2) r = inferkit::verify_greedy(draft, {p.data(), k + 1, v});
    mix(std::uint64_t(r.accepted));
    mix(std::uint64_t(r.bonus));
    for (TokenId t : r.tokens) mix(std::uint64_t(t));
  }
  return h;
}

// Tree verification outcomes over seeded random trees (up to 64 nodes, repeated sibling tokens,
// V up to 6,000: several 1,024-token blocks and four-block groups per row), folded into one
// FNV-1a hash; which: 0 sampled (verify_tree), 1 deterministic, 2 greedy.
std::uint64_t tree_outcome_hash(int which) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  std::mt19937 gen(9090u + unsigned(which));
  for (int c = 0; c < 300; ++c) {
    const Index v = gen() % 4 == 0 ? 3 + Index(gen() % 40) : 1000 + Index(gen() % 5000);
    const Index n = Index(gen() % 65);
    std::vector<Index> parents, path;
    for (Index i = 0; i < n; ++i) {
      const std::size_t keep = gen() % (path.size() + 1);
      path.resize(keep);
      parents.push_back(keep == 0 ? TokenTree::kRoot : path.back());
      path.push_back(i);
    }
    std::vector<TokenId> toks;
    for (Index i = 0; i < n; ++i) {  // one gen() per statement: the order of the draws is fixed
      const std::size_t draw = gen();
      const std::size_t range = gen() % 2 ? 3 : std::size_t(v);
      toks.push_back(TokenId(draw % range));
    }
    const TokenTree tree(toks, parents);
    std::gamma_distribution<double> g(0.3, 1.0);
    auto fill = [&](float* row, bool sparse) {
      std::vector<double> w(static_cast<std::size_t>(v));
      double s = 0;
      for (auto& x : w) x = (sparse && gen() % 3 == 0) ? 0.0 : g(gen) + 1e-3;
      w[gen() % 3] += 2.0;  // mass on the low tokens the tree often holds
      for (double x : w) s += x;
      for (Index i = 0; i < v; ++i) row[i] = float(w[std::size_t(i)] / s);
    };
    std::vector<float> q(std::size_t(tree.expanded_count() * v)), p(std::size_t((n + 1) * v));
    for (Index i = 0; i < tree.expanded_count(); ++i) fill(q.data() + i * v, false);
    for (Index i = 0; i <= n; ++i) fill(p.data() + i * v, true);
    const std::uint64_t stream = gen() % 5;  // drawn before the seed, as the test's values were made
    const std::uint64_t seed = gen();
    const inferkit::CounterRng rng(seed, stream);
    const std::uint64_t first = gen() % 1000;
    inferkit::VerifyResult r;
    if (which == 0)
      r = inferkit::verify_tree(tree, {q.data(), tree.expanded_count(), v}, {p.data(), n + 1, v}, rng, first);
    if (which == 1) r = inferkit::verify_tree_deterministic(tree, {p.data(), n + 1, v}, rng, first);
    if (which == 2) r = inferkit::verify_tree_greedy(tree, {p.data(), n + 1, v});
    mix(std::uint64_t(r.accepted));
    mix(std::uint64_t(r.bonus));
    for (TokenId t : r.tokens) mix(std::uint64_t(t));
    for (Index a : r.path) mix(std::uint64_t(a));
  }
  return h;
}

// A random depth-first shape of n nodes: each node's parent is the root or a node on the path to
// the previous node (independent of the tokens, as the sampled rule requires).
template <class Gen>
std::vector<Index> random_shape(Index n, Gen& gen) {
  std::vector<Index> parents, path;  // path: nodes from the root to the last node
  for (Index i = 0; i < n; ++i) {
    const std::size_t keep = gen() % (path.size() + 1);  // parent = path[keep - 1] or the root
    path.resize(keep);
    parents.push_back(keep == 0 ? TokenTree::kRoot : path.back());
    path.push_back(i);
  }
  return parents;
}

// The `k` most probable tokens of d, most probable first (ties to the lower id).
std::vector<TokenId> top_tokens(const test::Dist& d, std::size_t k) {
  std::vector<TokenId> ids(d.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return d[a] > d[b]; });
  ids.resize(std::min(k, ids.size()));
  return ids;
}

enum class Variant { sampled_fixed, sampled_random_shape, deterministic };

// Markov target P and draft Q over v tokens; drafts a tree from the context's last token,
// verifies it, and repeats until two tokens are emitted; the pair (first, second) must follow
// P[start][a] P[a][b] (chi-square over v^2 cells, 10^6 trials).
void check_two_token_joint(Variant variant, std::size_t v, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<test::Dist> P(v), Q(v);
  for (std::size_t s = 0; s < v; ++s) {
    P[s] = test::random_dist(v, gen, 0.15);
    Q[s] = test::random_dist(v, gen);
  }
  const TokenId start = 1;
  const long trials = 1000000;
  const inferkit::CounterRng draft_rng(seed, 1), verify_rng(seed, 2);
  std::uint64_t draft_draw = 0, verify_draw = 0;
  std::vector<long> joint(v * v, 0);
  long accepted_total = 0, rounds = 0, malformed = 0;
  std::vector<float> qm, pm;
  for (long t = 0; t < trials; ++t) {
    std::vector<TokenId> out;
    TokenId ctx = start;
    while (out.size() < 2) {
      TokenTree tree;
      // token at each position (0 = root)
      std::vector<TokenId> at{ctx};
      if (variant == Variant::deterministic) {
        // root: the draft's top 3; each of them: its top 2
        for (TokenId a : top_tokens(Q[ctx], 3)) {
          const Index na = tree.add(TokenTree::kRoot, a);
          for (TokenId b : top_tokens(Q[a], 2)) tree.add(na, b);
        }
      } else if (variant == Variant::sampled_fixed) {
        for (int i = 0; i < 3; ++i) {
          const TokenId a = test::draw(Q[ctx], draft_rng.uniform_double(draft_draw++));
          const Index na = tree.add(TokenTree::kRoot, a);
          for (int j = 0; j < 2; ++j) tree.add(na, test::draw(Q[a], draft_rng.uniform_double(draft_draw++)));
        }
      } else {
        std::minstd_rand shape_gen(static_cast<unsigned>(draft_draw) + 1u);
        const auto parents = random_shape(1 + Index(shape_gen() % 8), shape_gen);
        for (Index parent : parents) {
          const TokenId from = parent == TokenTree::kRoot ? ctx : tree.token(parent);
          tree.add(parent, test::draw(Q[from], draft_rng.uniform_double(draft_draw++)));
        }
      }
      for (Index i = 0; i < tree.size(); ++i) at.push_back(tree.token(i));
      pm.clear();
      qm.clear();
      for (std::size_t u = 0; u < at.size(); ++u) {
        pm.insert(pm.end(), P[at[u]].begin(), P[at[u]].end());
        if (tree.draft_row(Index(u)) >= 0) qm.insert(qm.end(), Q[at[u]].begin(), Q[at[u]].end());
      }
      const inferkit::MatrixView<const float> pv(pm.data(), tree.size() + 1, Index(v));
      const auto r =
          variant == Variant::deterministic
              ? inferkit::verify_tree_deterministic(tree, pv, verify_rng, verify_draw)
              : inferkit::verify_tree(tree, {qm.data(), tree.expanded_count(), Index(v)}, pv, verify_rng, verify_draw);
      verify_draw += tree.draw_blocks();
      malformed += r.tokens.size() != r.path.size() + 1;
      accepted_total += r.accepted;
      ++rounds;
      for (TokenId x : r.tokens) out.push_back(x);
      ctx = out.back();
    }
    ++joint[static_cast<std::size_t>(out[0]) * v + static_cast<std::size_t>(out[1])];
  }
  std::vector<double> expect(v * v);
  for (std::size_t a = 0; a < v; ++a)
    for (std::size_t b = 0; b < v; ++b) expect[a * v + b] = double(P[start][a]) * double(P[a][b]);
  bool impossible = false;
  const double chi = test::chi_square(joint, expect, trials, impossible);
  int df = -1;
  for (double x : expect) df += x > 0;
  INFO("chi2 = " << chi << " with " << df << " degrees of freedom; accepted drafts per round "
                 << double(accepted_total) / double(rounds));
  CHECK(malformed == 0);
  CHECK_FALSE(impossible);
  CHECK(chi < test::chi2_critical(df));
  CHECK(accepted_total > rounds / 4);  // the tree was actually exercised
}

}  // namespace

TEST_CASE("chains through the tree code give the results of the chain verifier before trees",
          "[sampling][tree_verify][heavy]") {
  CHECK(chain_outcome_hash(0) == 0x77cfe1abd59f5ac3ull);  // verify_draft
  CHECK(chain_outcome_hash(1) == 0xa1cc942ec2f39855ull);  // verify_point_mass_draft
  CHECK(chain_outcome_hash(2) == 0x883bd4ebc9d97289ull);  // verify_greedy
  // V = 1000 .. 4999: rows of several 1024-token blocks
  CHECK(chain_outcome_hash(0, true) == 0x59df41c5cbafa773ull);
  CHECK(chain_outcome_hash(1, true) == 0x94e11b871bea17d9ull);
  CHECK(chain_outcome_hash(2, true) == 0x89b53be7d2a3e721ull);
}

TEST_CASE("tree verification: the first two emitted tokens follow the target (chi-square, 10^6 trials)",
          "[sampling][tree_verify][statistics]") {
  SECTION("sampled siblings, 3 x 2 tree, V = 5") { check_two_token_joint(Variant::sampled_fixed, 5, 11); }
  SECTION("sampled siblings, random shapes, V = 6") { check_two_token_joint(Variant::sampled_random_shape, 6, 12); }
  SECTION("deterministic top-k siblings, 3 x 2 tree, V = 5") { check_two_token_joint(Variant::deterministic, 5, 13); }
}

TEST_CASE("tree verification: the first emitted token follows p at one position with many siblings",
          "[sampling][tree_verify][statistics]") {
  // Root with 6 sampled children (duplicates possible) and with the 4 deterministic top tokens:
  // every rejection path and the residual after several rejections are exercised.
  std::mt19937 gen(99);
  const std::size_t v = 8;
  const test::Dist p = test::random_dist(v, gen, 0.2), q = test::random_dist(v, gen);
  std::vector<float> pm;
  for (int i = 0; i < 7; ++i) pm.insert(pm.end(), p.begin(), p.end());
  const inferkit::CounterRng draft_rng(5, 1), verify_rng(5, 2);
  const long trials = 1000000;
  for (bool sampled : {true, false}) {
    std::vector<long> counts(v, 0);
    long rejected_all = 0;
    const auto top = top_tokens(q, 4);
    for (long t = 0; t < trials; ++t) {
      TokenTree tree;
      for (int c = 0; c < (sampled ? 6 : 4); ++c)
        tree.add(TokenTree::kRoot,
                 sampled ? test::draw(q, draft_rng.uniform_double(std::uint64_t(t * 6 + c))) : top[std::size_t(c)]);
      const inferkit::MatrixView<const float> pv(pm.data(), tree.size() + 1, Index(v));
      const auto r =
          sampled ? inferkit::verify_tree(tree, {q.data(), 1, Index(v)}, pv, verify_rng,
                                          std::uint64_t(t) * tree.draw_blocks())
                  : inferkit::verify_tree_deterministic(tree, pv, verify_rng, std::uint64_t(t) * tree.draw_blocks());
      ++counts[static_cast<std::size_t>(r.tokens[0])];
      rejected_all += r.accepted == 0;
    }
    std::vector<double> expect(p.begin(), p.end());
    bool impossible = false;
    const double chi = test::chi_square(counts, expect, trials, impossible);
    int df = -1;
    for (double x : expect) df += x > 0;
    INFO((sampled ? "sampled" : "deterministic")
         << ": chi2 = " << chi << " (df " << df << "), all rejected " << rejected_all);
    CHECK_FALSE(impossible);
    CHECK(chi < test::chi2_critical(df));
    CHECK(rejected_all > 0);
  }
}

TEST_CASE("greedy tree verification follows the target's argmax path", "[sampling][tree_verify]") {
  // Target: a deterministic successor function over 7 tokens; the accepted path must be the
  // deepest node whose root path spells the argmax sequence, found here by brute force.
  const Index v = 7;
  std::vector<float> logits_of(std::size_t(v * v));
  std::mt19937 gen(4);
  for (auto& x : logits_of) x = float(gen() % 1000) / 100.0f;
  auto best_after = [&](TokenId t) {
    return TokenId(std::max_element(logits_of.begin() + t * v, logits_of.begin() + (t + 1) * v) -
                   (logits_of.begin() + t * v));
  };
  for (int trial = 0; trial < 500; ++trial) {
    const TokenId ctx = TokenId(gen() % v);
    const auto parents = random_shape(1 + Index(gen() % 20), gen);
    TokenTree tree;
    for (Index parent : parents) {
      const TokenId from = parent == TokenTree::kRoot ? ctx : tree.token(parent);
      tree.add(parent, gen() % 2 ? best_after(from) : TokenId(gen() % v));
    }
    std::vector<float> target;
    for (Index u = 0; u <= tree.size(); ++u) {
      const TokenId t = u == 0 ? ctx : tree.token(u - 1);
      target.insert(target.end(), logits_of.begin() + t * v, logits_of.begin() + (t + 1) * v);
    }
    const auto r = inferkit::verify_tree_greedy(tree, {target.data(), tree.size() + 1, v});
    // Brute force: node i matches when every node on its root path has the argmax of its parent.
    Index deepest = -1;
    for (Index i = 0; i < tree.size(); ++i) {
      bool ok = true;
      for (Index a = i; a >= 0 && ok; a = tree.parent(a)) {
        const TokenId from = tree.parent(a) == TokenTree::kRoot ? ctx : tree.token(tree.parent(a));
        ok = tree.token(a) == best_after(from);
      }
      if (ok && (deepest < 0 || tree.depth(i) > tree.depth(deepest))) deepest = i;
    }
    const Index expect_len = deepest < 0 ? 0 : tree.depth(deepest);
    REQUIRE(r.accepted == expect_len);
    TokenId prev = ctx;
    for (TokenId x : r.tokens) {  // every emitted token is plain greedy decoding's next token
      CHECK(x == best_after(prev));
      prev = x;
    }
    if (r.accepted > 0) CHECK(tree.depth(r.path.back()) == r.accepted);
  }
}

TEST_CASE("tree verification: hand-checked cases and reproducibility", "[sampling][tree_verify]") {
  // Root children 0 and 2; node 0 has child 1. p rows by position: root, node 0, node 1, node 2.
  TokenTree tree;
  tree.add(TokenTree::kRoot, 0);
  tree.add(0, 1);
  tree.add(TokenTree::kRoot, 2);
  REQUIRE(tree.expanded_count() == 2);
  const std::vector<float> p{0.0f,  0.0f,  1.0f,  0.0f,  // root: certain 2
                             0.25f, 0.25f, 0.25f, 0.25f, 0.5f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f};
  const inferkit::MatrixView<const float> pv(p.data(), 4, 4);
  for (std::uint64_t s = 0; s < 20; ++s) {
    const inferkit::CounterRng rng(s);
    const auto d = inferkit::verify_tree_deterministic(tree, pv, rng, 0);
    // node 0 (token 0) has p = 0: rejected; node 2 (token 2) has p' = 1: accepted; leaf: bonus 3.
    CHECK(d.path == std::vector<Index>{2});
    CHECK(d.tokens == std::vector<TokenId>{2, 3});
    CHECK(d.bonus);
    const std::vector<float> q{0.5f, 0.0f, 0.5f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f};
    const auto r = inferkit::verify_tree(tree, {q.data(), 2, 4}, pv, rng, 0);
    CHECK(r.path == std::vector<Index>{2});  // after rejecting 0, p' = max(p - q, 0) is all on 2
    CHECK(r.tokens == std::vector<TokenId>{2, 3});
    const auto again = inferkit::verify_tree(tree, {q.data(), 2, 4}, pv, rng, 0);
    CHECK(again.tokens == r.tokens);
  }
  // All children rejected at the root: the token comes from p minus the tried tokens.
  const std::vector<float> p2{0.0f,  0.6f,  0.0f,  0.4f,  0.25f, 0.25f, 0.25f, 0.25f,
                              0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
  for (std::uint64_t s = 0; s < 20; ++s) {
    const auto d = inferkit::verify_tree_deterministic(tree, {p2.data(), 4, 4}, inferkit::CounterRng(s), 0);
    CHECK(d.accepted == 0);
    CHECK((d.tokens[0] == 1 || d.tokens[0] == 3));
    CHECK_FALSE(d.bonus);
  }
  // The empty tree is the bonus draw alone.
  const TokenTree none;
  const auto b = inferkit::verify_tree_deterministic(none, {p.data(), 1, 4}, inferkit::CounterRng(1), 0);
  CHECK(b.tokens == std::vector<TokenId>{2});
  CHECK(b.bonus);
}

TEST_CASE("tree verification rejects malformed input", "[sampling][tree_verify][errors]") {
  TokenTree tree;
  tree.add(TokenTree::kRoot, 0);
  tree.add(TokenTree::kRoot, 3);
  const std::vector<float> row{0.25f, 0.25f, 0.5f, 0.0f};
  std::vector<float> p;
  for (int i = 0; i < 3; ++i) p.insert(p.end(), row.begin(), row.end());
  const inferkit::CounterRng rng(1);
  CHECK_THROWS_WITH(inferkit::verify_tree(tree, {p.data(), 2, 4}, {p.data(), 3, 4}, rng, 0), Contains("q.rows() = 2"));
  CHECK_THROWS_WITH(inferkit::verify_tree(tree, {p.data(), 1, 4}, {p.data(), 2, 4}, rng, 0), Contains("p.rows() = 2"));
  const std::vector<float> q{0.5f, 0.5f, 0.0f, 0.0f};  // q gives token 3 nothing
  inferkit::MatrixView<const float> pv(p.data(), 3, 4);
  // token 0 is tried first (rank 0); whatever happens to it, token 3 must have q > 0 when reached
  bool threw = false;
  for (std::uint64_t s = 0; s < 40 && !threw; ++s) {
    try {
      (void)inferkit::verify_tree(tree, {q.data(), 1, 4}, pv, inferkit::CounterRng(s), 0);
    } catch (const std::invalid_argument& e) {
      threw = std::string(e.what()).find("q[0][3] = 0") != std::string::npos;
    }
  }
  CHECK(threw);
  TokenTree wide;
  wide.add(TokenTree::kRoot, 9);
  CHECK_THROWS_AS(inferkit::verify_tree_deterministic(wide, {p.data(), 2, 4}, rng, 0), std::out_of_range);
  CHECK_THROWS_AS(inferkit::verify_tree_greedy(wide, {p.data(), 2, 4}), std::out_of_range);
  std::vector<float> bad = p;
  bad[4 + 1] = std::nanf("");
  inferkit::VerifyOptions all;
  all.check_all_rows = true;
  CHECK_THROWS_WITH(inferkit::verify_tree_deterministic(tree, {bad.data(), 3, 4}, rng, 0, all),
                    Contains("p[1][1] = nan"));
  // A chain longer than a tree holds.
  std::vector<TokenId> long_draft(65, 0);
  std::vector<float> big(66 * 4, 0.25f);
  CHECK_THROWS_WITH(inferkit::verify_point_mass_draft(long_draft, {big.data(), 66, 4}, rng, 0),
                    Contains("tree size = 65"));
}

namespace {

// The reference argmax: the lowest id of the largest value, compared in double.
TokenId naive_argmax(const float* row, Index v) {
  Index best = 0;
  for (Index i = 1; i < v; ++i)
    if (double(row[i]) > double(row[best])) best = i;
  return TokenId(best);
}

// A row whose values come from a few levels (many exact ties, sometimes -inf), so the lowest-id
// rule is exercised in every block and lane.
std::vector<float> tied_row(Index v, std::mt19937& gen) {
  std::vector<float> row(static_cast<std::size_t>(v));
  const unsigned levels = 1 + gen() % 6;
  for (auto& x : row) {
    const unsigned l = gen() % (levels + 1);
    x = l == levels ? -std::numeric_limits<float>::infinity() : float(l) * 0.5f - 1.0f;
  }
  row[gen() % row.size()] = float(levels) * 0.5f - 1.0f;  // at least one finite value
  return row;
}

}  // namespace

TEST_CASE("row_argmax: every path equals a naive fp64 argmax, lowest id among ties", "[sampling][tree_verify]") {
  using inferkit::RowArgmaxPath;
  std::mt19937 gen(31);
  const std::vector<Index> sizes = {1, 2, 7, 8, 15, 16, 17, 63, 64, 65, 1023, 1024, 1025, 2047, 3000, 128256};
  int checked = 0;
  for (RowArgmaxPath path :
       {RowArgmaxPath::kAuto, RowArgmaxPath::kScalar, RowArgmaxPath::kAvx2, RowArgmaxPath::kAvx512}) {
    if (!inferkit::has_row_argmax_path(path)) continue;
    for (int trial = 0; trial < 120; ++trial) {
      const Index v = trial < Index(sizes.size()) ? sizes[std::size_t(trial)] : 1 + Index(gen() % 5000);
      std::vector<float> row;
      if (trial % 3 == 0) {
        std::normal_distribution<float> nd(0.0f, 3.0f);
        for (Index i = 0; i < v; ++i) row.push_back(nd(gen));
        row[gen() % row.size()] = 50.0f;                 // the max, somewhere
        if (gen() % 2) row[gen() % row.size()] = 50.0f;  // sometimes twice
      } else {
        row = tied_row(v, gen);
      }
      const auto s = inferkit::row_argmax(row, path);
      REQUIRE(s.argmax == naive_argmax(row.data(), v));
      CHECK(s.max == row[std::size_t(s.argmax)]);
      ++checked;
    }
  }
  CHECK(checked >= 240);  // at least the scalar path and the build's widest
}

TEST_CASE("row_argmax: NaN, +inf and all -inf rows are refused as scan_logits refuses them",
          "[sampling][tree_verify][errors]") {
  using inferkit::RowArgmaxPath;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (RowArgmaxPath path :
       {RowArgmaxPath::kAuto, RowArgmaxPath::kScalar, RowArgmaxPath::kAvx2, RowArgmaxPath::kAvx512}) {
    if (!inferkit::has_row_argmax_path(path)) {
      CHECK_THROWS_WITH(inferkit::row_argmax(std::vector<float>{1.0f}, path), Contains("is not in this build"));
      continue;
    }
    for (Index v : {5, 16, 1000, 1030, 4099}) {
      for (Index at : {Index(0), v / 2, v - 1}) {
        for (float bad : {nan, -nan, inf}) {
          std::vector<float> row(static_cast<std::size_t>(v), 1.0f);
          row[std::size_t(at)] = bad;
          if (at > 0) row[0] = inf;  // an earlier bad value is the one named
          const std::string first = "logits[" + std::to_string(0) + "]";
          const std::string named = at > 0 ? first : "logits[" + std::to_string(at) + "]";
          CHECK_THROWS_WITH(inferkit::row_argmax(row, path), Contains(named));
          std::string expected;
          try {
            (void)inferkit::scan_logits(row);
          } catch (const std::invalid_argument& e) {
            expected = e.what();
          }
          CHECK_THROWS_WITH(inferkit::row_argmax(row, path), expected);
        }
        std::vector<float> row(static_cast<std::size_t>(v), 1.0f);
        row[std::size_t(at)] = nan;  // the only bad value, anywhere in the row
        CHECK_THROWS_WITH(inferkit::row_argmax(row, path), Contains("logits[" + std::to_string(at) + "]"));
      }
      CHECK_THROWS_WITH(inferkit::row_argmax(std::vector<float>(std::size_t(v), -inf), path),
                        Contains("no logit is finite"));
    }
    CHECK_THROWS_WITH(inferkit::row_argmax(std::vector<float>{}, path), Contains("logits.size()"));
  }
}

TEST_CASE("greedy tree verification equals a naive fp64 walk on random trees with ties", "[sampling][tree_verify]") {
  // Rows with many tied maxima and trees whose siblings repeat tokens (several matching children
  // at a position): the reference argmaxes every row in double, marks the matching nodes from the
  // root down, and takes the deepest, the first in depth-first order among equally deep ones.
  std::mt19937 gen(3131);
  for (int trial = 0; trial < 400; ++trial) {
    const Index v = trial % 4 == 0 ? 1025 + Index(gen() % 2000) : 2 + Index(gen() % 6);
    const Index n = Index(gen() % (TokenTree::kMaxNodes + 1));
    std::vector<float> target;
    for (Index u = 0; u <= n; ++u) {
      const auto row = tied_row(v, gen);
      target.insert(target.end(), row.begin(), row.end());
    }
    std::vector<TokenId> best(std::size_t(n + 1));
    for (Index u = 0; u <= n; ++u) best[std::size_t(u)] = naive_argmax(target.data() + u * v, v);
    const auto parents = random_shape(n, gen);
    TokenTree tree;
    for (Index parent : parents)  // mostly the argmax (tied rows make it often repeat among siblings)
      tree.add(parent, gen() % 3 ? best[std::size_t(parent + 1)] : TokenId(gen() % std::size_t(v)));
    std::vector<char> match(std::size_t(n), 0);
    Index deepest = -1;
    for (Index i = 0; i < n; ++i) {  // parents come before children
      const Index par = tree.parent(i);
      match[std::size_t(i)] = (par < 0 || match[std::size_t(par)]) && tree.token(i) == best[std::size_t(par + 1)];
      if (match[std::size_t(i)] && (deepest < 0 || tree.depth(i) > tree.depth(deepest))) deepest = i;
    }
    const auto r = inferkit::verify_tree_greedy(tree, {target.data(), n + 1, v});
    std::vector<Index> path;
    for (Index a = deepest; a >= 0; a = tree.parent(a)) path.insert(path.begin(), a);
    REQUIRE(r.path == path);
    REQUIRE(r.accepted == Index(path.size()));
    REQUIRE(r.tokens.size() == path.size() + 1);
    for (std::size_t j = 0; j < path.size(); ++j) CHECK(r.tokens[j] == tree.token(path[j]));
    CHECK(r.tokens.back() == best[std::size_t(deepest + 1)]);
    CHECK(r.bonus == (tree.first_child(deepest + 1) < 0));
  }
}

TEST_CASE("sum4_as_double sums each array bit for bit as sum_as_double", "[sampling][tree_verify]") {
  // The row scans of tree verification sum four blocks at once; every draw walks to u * total
  // with those sums, so they must be exactly the one-array sums (not merely close).
  std::mt19937 gen(77);
  std::uniform_real_distribution<float> uf(0.0f, 1.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = trial < 40 ? std::size_t(trial) : std::size_t(gen() % 3000);
    std::vector<std::vector<float>> a(4, std::vector<float>(n));
    for (auto& x : a)
      for (auto& y : x) y = uf(gen) * std::pow(10.0f, float(int(gen() % 13) - 9));  // many magnitudes
    const float* xs[4] = {a[0].data(), a[1].data(), a[2].data(), a[3].data()};
    double out[4];
    inferkit::detail::sum4_as_double(xs, n, out);
    for (int k = 0; k < 4; ++k) {
      REQUIRE(out[k] == inferkit::simd::sum_as_double(xs[k], n));
      double ref = 0;  // and the sum itself, against fp64 in index order
      for (float y : a[std::size_t(k)]) ref += double(y);
      CHECK(std::abs(out[k] - ref) <= 1e-12 * (1.0 + std::abs(ref)));
    }
  }
}

TEST_CASE("tree verification gives the results it gave before the row passes were regrouped",
          "[sampling][tree_verify]") {
  // Expected values printed by tree_verify.hpp at commit 355d0fc (residual rows stored whole,
  // blocks summed one by one, argmax by scan_logits), identical at -O2 -march=native,
  // -march=haswell and INFERKIT_FORCE_SCALAR: the four-block sums, the recomputed residual and
  // row_argmax change no outcome.
  CHECK(tree_outcome_hash(0) == 0x62474c3c566a11e5ull);  // verify_tree (sampled children)
  CHECK(tree_outcome_hash(1) == 0x0963457bcb985b24ull);  // verify_tree_deterministic
  CHECK(tree_outcome_hash(2) == 0xa8e0a6a878bbb239ull);  // verify_tree_greedy
}
